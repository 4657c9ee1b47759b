"""RWKV-4's time mixing (Peng et al. 2023): the WKV recurrence with a fixed decay per channel.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.rwkv.kernel`: the WKV recurrence, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.rwkv.block`: the RWKVTimeMix block;
* :mod:`~hiddenstate.kinds.rwkv.view`: the RecordView the analyses read, and the kind's record;
* :mod:`~hiddenstate.kinds.rwkv.analysis`: what the analyses measure on its state;
* :mod:`~hiddenstate.kinds.rwkv.card`: what the family page says of it.
"""

from hiddenstate.core.oldpaths import moved_names

# 0.2's module ``hiddenstate.kinds.rwkv`` is this folder's ``view`` now: its names still resolve here, with a warning
__getattr__ = moved_names(__name__, "hiddenstate.kinds.rwkv.view", ('KINDS', 'RWKVRecord', 'rwkv_run', 'rwkv_states', 'rwkv_view'))
