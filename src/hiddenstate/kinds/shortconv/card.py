"""What the family page says of the short convolution's layers: ``CARD``, the generic card of the rows each layer gives.

The layer's analysis (:class:`~hiddenstate.probe.state_analysis.RecurrenceLayerAnalysis`, with the
words of :mod:`hiddenstate.kinds.shortconv.analysis`) lists its measurements itself
(``card_rows()``, ``flow_note``), and its ``meta`` says what the state is, what a unit is and how
many entries the state has: the page shows them as :data:`hiddenstate.report.cards.ROWS_CARD` does.
"""

from __future__ import annotations

from hiddenstate.report.cards import ROWS_CARD

__all__ = ["CARD"]

#: The kind's card (registered with the kind ``"shortconv"``, :mod:`hiddenstate.kinds.shortconv.view`).
CARD = ROWS_CARD
