"""Central DP: the exponential-mechanism selector over a finite set of candidates (003 Algorithm 2)."""

from squarechipo.select.exponential import (
    ROW_LOSS_SENSITIVITY,
    row_square_losses,
    select_index,
)

__all__ = ["ROW_LOSS_SENSITIVITY", "row_square_losses", "select_index"]
