"""The column names every stage agrees on: a preference pair's columns, the label-carrying names, the prior flag.

The data layer owns them, so the loader, the validator, the release and the trainers read one definition.
"""

from __future__ import annotations

import re

__all__ = ["FROM_PRIOR_COLUMN", "LABEL_CARRYING", "NOT_A_UNIT", "PAIR_COLUMNS", "RESPONSE_COLUMNS"]

#: The two responses of a pair; their order is the label.
RESPONSE_COLUMNS = ("chosen", "rejected")
#: The columns a pair release always keeps: the released label is the order of the responses.
PAIR_COLUMNS = ("prompt", *RESPONSE_COLUMNS)
#: Columns of the comparison itself, which a release removes or rewrites: never a unit of privacy.
NOT_A_UNIT = (*PAIR_COLUMNS, "responses", "best")
#: Public per-row flag: the released label is the prior's argmax (k* = 1, RRWithPrior).
FROM_PRIOR_COLUMN = "label_from_prior"
#: Column names that can carry the label (a score or rating per response, a preference or winner, a conversation
#: ending in the chosen answer, which response was shown first): dropped by a release, never public.
LABEL_CARRYING = re.compile(r"score|rating|label|prefer|winner|shown_first|messages|chosen|rejected", re.IGNORECASE)
