"""The selective state spaces: Mamba (Gu & Dao 2023) and Mamba-2 / SSD (Dao & Gu 2024).

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.ssm.mamba_kernel`: Mamba's selective scan, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.ssm.mamba2_kernel`: Mamba-2's scan with a scalar decay per head, forward and exact backward;
* :mod:`~hiddenstate.kinds.ssm.block`: SelectiveSSMBlock, the base both blocks share;
* :mod:`~hiddenstate.kinds.ssm.mamba`: the Mamba block;
* :mod:`~hiddenstate.kinds.ssm.mamba2`: the Mamba-2 block;
* :mod:`~hiddenstate.kinds.ssm.lm`: MambaLM and Mamba2LM, the language models of stacked blocks;
* :mod:`~hiddenstate.kinds.ssm.stack`: the character model's stack of Mamba blocks (cell='mamba');
* :mod:`~hiddenstate.kinds.ssm.reference`: the array-API reference step of the Mamba block and its adjoint;
* :mod:`~hiddenstate.kinds.ssm.view`: the RecordView the analyses read of a record;
* :mod:`~hiddenstate.kinds.ssm.mamba_analysis`: what the analyses measure on Mamba's state;
* :mod:`~hiddenstate.kinds.ssm.mamba2_analysis`: the same on Mamba-2's, per head;
* :mod:`~hiddenstate.kinds.ssm.card`: what the family page says of both.
"""

from hiddenstate.core.oldpaths import moved_names

# 0.2's module ``hiddenstate.kinds.ssm`` is this folder's ``view`` now: its names still resolve here, with a warning
__getattr__ = moved_names(__name__, "hiddenstate.kinds.ssm.view", ('KINDS', 'mamba2_view', 'mamba_view', 'ssm_states'))
