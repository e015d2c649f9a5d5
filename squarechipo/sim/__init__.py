"""The simulation lab: the papers' theory on problems with exact answers (``python -m squarechipo.sim``).

- :mod:`squarechipo.sim.bandit` — the alignment bandit of Zhou et al. 2025 (Square-χPO) with exact J(π) and gaps.
- :mod:`squarechipo.sim.bt` — private Bradley–Terry reward estimation
  (Chowdhury et al. 2024 (private reward estimation), §6).
- :mod:`squarechipo.sim.experiments` — one module per experiment: its grid, resumable CSV run, and report (the
  printed figures with confidence intervals, and the plots).
"""
