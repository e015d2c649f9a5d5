"""Reproductions of the papers' experiments as resumable commands (``python -m squarechipo.reproduce``)."""
