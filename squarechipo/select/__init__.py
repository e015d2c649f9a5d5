"""Central DP: the exponential-mechanism selector over a finite set of candidates (Zhou et al. 2025 (Square-χPO),
Algorithm 2).

Score-vector interface (scores in, index out): :func:`select_index`. LLM policies:
:func:`select_policy` (recipe: ``recipes/select_policy.py``).
"""

from squarechipo.select.exponential import (
    ROW_LOSS_SENSITIVITY,
    row_square_losses,
    select_index,
)
from squarechipo.select.selector import Selection, select_policy

__all__ = ["ROW_LOSS_SENSITIVITY", "Selection", "row_square_losses", "select_index", "select_policy"]
