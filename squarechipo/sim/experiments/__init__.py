"""The lab's experiments, one module each: its grid, the run of one grid point, and its report.

- :mod:`~squarechipo.sim.experiments.bandit` — rates, privacy, order, robustness and central DP on the bandit;
- :mod:`~squarechipo.sim.experiments.overopt` — over-optimisation along training;
- :mod:`~squarechipo.sim.experiments.bt` — private Bradley–Terry estimation;
- :mod:`~squarechipo.sim.experiments.general` — iterative Square-χPO on general preferences;
- :mod:`~squarechipo.sim.experiments.labeldp` — multi-stage label DP and the K-ary mechanisms.

What they share: :mod:`~squarechipo.sim.experiments.grid` (point keys, seeds, the resumable CSV run) and
:mod:`~squarechipo.sim.experiments.tables` (intervals, verdicts, plots). A new experiment is one new module here and
one line in ``squarechipo.sim.__main__.EXPERIMENTS``.
"""

from squarechipo.sim.experiments.bandit import BANDIT_COLUMNS, INSTANCE, bandit_grid, bandit_report, run_bandit_point
from squarechipo.sim.experiments.bt import BT_COLUMNS, BT_NS, bt_grid, bt_report, run_bt_point
from squarechipo.sim.experiments.general import (
    GENERAL_COLUMNS,
    GENERAL_INSTANCE,
    general_grid,
    general_report,
    general_rows_per_seed,
    run_general_point,
)
from squarechipo.sim.experiments.grid import SCALES, point_key, run_grid
from squarechipo.sim.experiments.labeldp import (
    MULTISTAGE_COLUMNS,
    MULTISTAGE_METHODS,
    kary_report,
    multistage_grid,
    multistage_report,
    run_multistage_point,
)
from squarechipo.sim.experiments.overopt import (
    OVEROPT_COLUMNS,
    OVEROPT_INSTANCE,
    OVEROPT_SEEDS,
    overopt_grid,
    overopt_report,
    overopt_rows_per_seed,
    run_overopt_point,
)
from squarechipo.sim.experiments.tables import load_rows

__all__ = [
    "BANDIT_COLUMNS", "BT_COLUMNS", "BT_NS", "GENERAL_COLUMNS", "GENERAL_INSTANCE", "INSTANCE", "MULTISTAGE_COLUMNS",
    "MULTISTAGE_METHODS", "OVEROPT_COLUMNS", "OVEROPT_INSTANCE", "OVEROPT_SEEDS", "SCALES", "bandit_grid",
    "bandit_report", "bt_grid", "bt_report", "general_grid", "general_report", "general_rows_per_seed", "kary_report",
    "load_rows", "multistage_grid", "multistage_report", "overopt_grid", "overopt_report", "overopt_rows_per_seed",
    "point_key", "run_bandit_point", "run_bt_point", "run_general_point", "run_grid", "run_multistage_point",
    "run_overopt_point",
]  # fmt: skip
