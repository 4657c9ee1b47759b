"""The mLSTM of xLSTM (Beck et al. 2024): a matrix memory with exponential gating.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.mlstm.kernel`: the recurrent, chunkwise and parallel forms, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.mlstm.block`: the MLSTMLayer block;
* :mod:`~hiddenstate.kinds.mlstm.view`: the RecordView the analyses read, and the kind's record;
* :mod:`~hiddenstate.kinds.mlstm.analysis`: what the analyses measure on its state;
* :mod:`~hiddenstate.kinds.mlstm.card`: what the family page says of it.
"""

from hiddenstate.core.oldpaths import moved_names

# 0.2's module ``hiddenstate.kinds.mlstm`` is this folder's ``view`` now: its names still resolve here, with a warning
__getattr__ = moved_names(__name__, "hiddenstate.kinds.mlstm.view", ('KINDS', 'MLSTMRecord', 'mlstm_run', 'mlstm_states', 'mlstm_view'))
