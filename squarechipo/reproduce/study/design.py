"""The design of the controlled study: its arms, its claims and every size, as one frozen dataclass.

An arm is a method trained on one kind of labels (CTL or LTC at some ε with α = 0.1 and the flip adversary, or
clean labels), with or without the c(ε) debiasing. The arms of one seed that share a label setting train on one
release, so every method comparison is paired by seed. The claims are those of Zhou et al. 2025 (Square-χPO,
App. E and Thm 3.5) plus the comparison with DPO and rDPO that users ask for; each is a paired difference of
the primary metric between two arms.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from squarechipo.losses import METHOD_NAMES

__all__ = [
    "Arm",
    "Claim",
    "CLAIMS",
    "Conclusion",
    "Gate",
    "MAIN_ARMS",
    "PILOT_ARMS",
    "SETUP_FIELDS",
    "StudyDesign",
    "load_design",
    "refuse_emulated_bf16",
]


def _eps_name(epsilon: float | None) -> str:
    return "inf" if epsilon is None else f"{epsilon:g}"


@dataclass(frozen=True)
class Arm:
    """A method on one label setting. ``debias=False`` trains Square-χPO with c = 1 on private labels.

    ``tier`` orders the cuts when the budget binds: tier 3 arms go first, then tier 2 (tier 1 is never cut).
    """

    method: str
    setting: str  # "CTL", "LTC" or "clean"
    epsilon: float | None  # None = no randomized response
    debias: bool = True
    tier: int = 1
    #: Training rows of this arm (None: the design's ``train_rows``). A seed's rows are nested: the first
    #: ``train_rows`` of them are the design's, with the same labels, so arms of one seed stay paired.
    rows: int | None = None
    #: β of this arm (None: the design's ``beta``).
    beta: float | None = None

    @property
    def key(self) -> str:
        suffix = "" if self.debias else "_nodebias"
        suffix += "" if self.rows is None else f"_n{self.rows}"
        suffix += "" if self.beta is None else f"_beta{self.beta:g}"
        return f"{self.setting.lower()}_eps{_eps_name(self.epsilon)}_{self.method}{suffix}"

    @property
    def label(self) -> str:
        name = METHOD_NAMES.get(self.method, self.method) + ("" if self.debias else " (c = 1)")
        where = "clean" if self.setting == "clean" else f"{self.setting} ε={_eps_name(self.epsilon)}"
        more = ("" if self.rows is None else f", {self.rows} rows") + (
            "" if self.beta is None else f", β={self.beta:g}"
        )
        return f"{name}, {where}{more}"

    def release(self, seed: int, corruption_rate: float) -> str:
        """The release this arm trains on, shared by every arm of the seed with the same label setting and rows."""
        alpha = 0.0 if self.setting == "clean" else corruption_rate
        rows = "" if self.rows is None else f"_n{self.rows}"
        return f"{self.setting.lower()}_eps{_eps_name(self.epsilon)}_alpha{alpha:g}{rows}_seed{seed}"


#: What a claim compares, per seed (``squarechipo.reproduce.study.claims``): two arms at the end of training; one
#: arm's fall from its reference epoch to the end (over-optimisation); two arms' falls; or two arms' gold gain at
#: the same KL from the SFT policy.
CLAIM_KINDS = ("arms", "drop", "drop_difference", "matched_kl")


def is_win_rate(metric: str) -> bool:
    """A win rate (expected or hard win): reported in points around ½; the other metrics are gains in r* or nats."""
    return metric.endswith("win")


@dataclass(frozen=True)
class Claim:
    """A pre-registered claim, paired by seed, on ``metric`` (a summary metric of the cells).

    - ``arms``: ``first`` beats ``second`` at the end of training;
    - ``drop``: ``first``'s metric at its reference epoch (the checkpoint before the last where the pilot's mean was
      largest, fixed in the pre-registration) is above its metric at the end: it over-optimises;
    - ``drop_difference``: ``second`` falls more than ``first`` from their reference epochs to the end;
    - ``matched_kl``: ``first``'s gold gain is above ``second``'s at the same KL(π‖π_SFT), the largest KL both
      reached in that seed (each gain read off its curve through its checkpoints and the SFT policy's (0, 0)).
    """

    name: str
    first: str  # Arm.key
    second: str = ""
    metric: str = "expected_win"
    kind: str = "arms"

    def __post_init__(self) -> None:
        if self.kind not in CLAIM_KINDS:
            raise ValueError(f"claim {self.name!r}: kind must be one of {CLAIM_KINDS} (got {self.kind!r}).")
        if self.kind != "drop" and not self.second:
            raise ValueError(f"claim {self.name!r}: a {self.kind} claim compares two arms; give `second`.")
        if self.kind == "matched_kl" and self.metric != "gold_gain":
            raise ValueError(
                f"claim {self.name!r}: a matched_kl claim reads gold_gain along KL (the SFT policy is its origin, "
                f"KL 0 and gain 0); got metric {self.metric!r}."
            )

    @property
    def measures_a_drop(self) -> bool:
        """A fall from a pre-registered reference epoch (its arms need one; a pilot arm of the method stands in)."""
        return self.kind in ("drop", "drop_difference")

    @property
    def arms(self) -> tuple[str, ...]:
        return (self.first,) if self.kind == "drop" else (self.first, self.second)


@dataclass(frozen=True)
class Conclusion:
    """A pre-registered reading that combines claims: it counts as shown only if every claim in ``holds`` holds
    and no claim in ``not_reversed`` is reversed (e.g. "over-optimises less": the falls differ and the matched-KL
    comparison does not go the other way). Written before the pilot, so the report states it, not a reader."""

    name: str
    holds: tuple[str, ...] = ()
    not_reversed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "holds", tuple(self.holds))
        object.__setattr__(self, "not_reversed", tuple(self.not_reversed))
        if not self.holds:
            raise ValueError(f"conclusion {self.name!r}: name at least one claim that must hold (`holds`).")


#: Summary metrics of a cell and the factor that puts them in the report's units (win rates in points).
METRIC_SCALE = {
    "expected_win": 100.0,
    "hard_win": 100.0,
    "gold_gain": 1.0,
    "gold_gain_clean": 1.0,  # without degenerate samples (squarechipo.evaluation.degenerate)
    "kl": 1.0,
    "pool_gain": 1.0,
}


@dataclass(frozen=True)
class Gate:
    """A go/no-go rule fixed before the pilot: the main run goes on only if the pilot arm ``arm`` reaches a mean
    ``metric`` of at least ``at_least`` over the pilot's seeds at the end of training, or at checkpoint ``epoch``
    (e.g. a DPO β that must move the policy far enough from π_ref for over-optimisation to be possible)."""

    arm: str  # a pilot Arm.key
    metric: str = "kl"
    at_least: float = 0.0
    why: str = ""
    #: The checkpoint epoch the metric is read at (None: the end of training).
    epoch: float | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRIC_SCALE:
            raise ValueError(f"pilot_gate.metric must be one of {sorted(METRIC_SCALE)} (got {self.metric!r}).")
        if isinstance(self.at_least, bool) or not isinstance(self.at_least, (int, float)):
            raise ValueError(f"pilot_gate.at_least must be a number, in the metric's units (got {self.at_least!r}).")


def _arm(method: str, setting: str, epsilon: float | None, debias: bool = True, tier: int = 1) -> Arm:
    return Arm(method, setting, epsilon, debias, tier)


PILOT_ARMS: tuple[Arm, ...] = (_arm("dpo", "CTL", 0.5), _arm("square_chipo", "CTL", 0.5))

MAIN_ARMS: tuple[Arm, ...] = (
    *(_arm(m, "CTL", 0.5) for m in ("square_chipo", "chipo", "dpo", "rdpo")),
    _arm("square_chipo", "CTL", 0.5, debias=False),
    *(_arm(m, "LTC", 0.5) for m in ("square_chipo", "chipo", "dpo", "rdpo")),
    _arm("square_chipo", "clean", None),
    _arm("dpo", "clean", None),  # rDPO with flip rate 0 is DPO: the clean reference of both
    *(_arm(m, "CTL", 1.0, tier=2) for m in ("square_chipo", "dpo", "rdpo")),
    _arm("square_chipo", "CTL", 1.0, debias=False, tier=2),
    *(_arm(m, "CTL", 2.0, tier=3) for m in ("square_chipo", "dpo")),
)

CLAIMS: tuple[Claim, ...] = (
    Claim("Square-χPO ≥ χPO under CTL (ε = 0.5)", "ctl_eps0.5_square_chipo", "ctl_eps0.5_chipo"),
    Claim("Square-χPO ≥ χPO under LTC (ε = 0.5)", "ltc_eps0.5_square_chipo", "ltc_eps0.5_chipo"),
    Claim("CTL > LTC for Square-χPO (ε = 0.5)", "ctl_eps0.5_square_chipo", "ltc_eps0.5_square_chipo"),
    Claim("CTL > LTC for χPO (ε = 0.5)", "ctl_eps0.5_chipo", "ltc_eps0.5_chipo"),
    Claim(
        "debiasing helps Square-χPO at ε = 0.5 (CTL)", "ctl_eps0.5_square_chipo", "ctl_eps0.5_square_chipo_nodebias"
    ),
    Claim("debiasing helps Square-χPO at ε = 1 (CTL)", "ctl_eps1_square_chipo", "ctl_eps1_square_chipo_nodebias"),
    Claim("Square-χPO ≥ DPO under CTL (ε = 0.5)", "ctl_eps0.5_square_chipo", "ctl_eps0.5_dpo"),
    Claim("Square-χPO ≥ rDPO under CTL (ε = 0.5)", "ctl_eps0.5_square_chipo", "ctl_eps0.5_rdpo"),
    Claim("Square-χPO ≥ DPO under LTC (ε = 0.5)", "ltc_eps0.5_square_chipo", "ltc_eps0.5_dpo"),
    Claim("Square-χPO ≥ rDPO under LTC (ε = 0.5)", "ltc_eps0.5_square_chipo", "ltc_eps0.5_rdpo"),
)


@dataclass(frozen=True)
class StudyDesign:
    """Every setting of the study; the pre-registration freezes it before the main run.

    The defaults were fixed before the pilot ran, from timings alone: a cell (training in its own process,
    then the gold evaluation) of 128 rows (16 steps of 8, about 7 s a step in bf16 autocast on 2 cores) and
    128 prompts × 2 samples is about 4 min, so the 17 arms of a seed take a little over an hour and the budget
    (7.5 h, under the 8 h the study may use) holds about 6 seeds of every arm. β = 0.1 and R_max = 5 are the
    main job's. The SFT data and its size were chosen by looking at the SFT policy alone (its samples are
    coherent and loop-free at temperature 1, and answer both ways), before any aligned policy was trained.

    The learning rate was changed once, after the first pilot and before any main-run cell was kept: at the
    main job's 5e-5 (full fine-tuning) the 6 pilot cells moved 9–53 nats of KL(π‖π_ref) in 16 steps, the
    implicit-reward accuracy on clean test pairs stayed high (0.69–0.98) while the gold gain of the samples
    swung between −0.8 and +1.3, and the paired difference had a between-seed SD of 7.9 points, so the budget
    gave an MDE of 21 points. 1e-5 was chosen by reasoning alone (KL grows about as the square of the step, so
    a fifth of the step should keep KL within a few nats), not by trying values; the second pilot then ran
    once. The first pilot's records are kept in ``results/study_pilot_lr5e-5``.
    """

    name: str = "cpu"
    data_dir: str = "data"
    base_model: str = "embedded"
    # SFT on rows disjoint from the preference rows. The mixed rows (prudent or risky plan, a fair coin per row)
    # give a starting policy that answers both ways, so a gain has to come from the preference labels.
    sft_data: str = "finance_sft_mixed_conversational"
    sft_rows: int | None = 512
    sft_epochs: float = 1.0
    sft_learning_rate: float = 5e-5
    # LoRA rank of the SFT policy (alpha = 2·rank, every linear layer). None: full fine-tuning, as in the first
    # study, whose set-up lived only in its work folder. With a rank, the set-up is committed as the adapter and the
    # gold judge's head, and every cell checks the rebuilt weights' digests (squarechipo.reproduce.study.shared_setup).
    sft_lora_r: int | None = None
    # Another study's results folder whose committed set-up (SFT adapter, gold head, SFT samples and record) this
    # study shares: its set-up fields (SETUP_FIELDS) must be this design's.
    setup_from: str | None = None
    # The gold reward r*: the gold judge fitted on this many public `judge` rows.
    judge_rows: int | None = None
    label_source: str = "bt"
    corruption_rate: float = 0.1
    # Alignment: each seed draws its own training rows from the train split.
    train_rows: int = 128
    epochs: float = 1.0
    batch_size: int = 8
    learning_rate: float = 1e-5
    beta: float = 0.1
    r_max: float = 5.0
    max_length: int = 256
    bf16: bool = True
    # Training length studies: the epochs at which each cell is also measured (the last one is ``epochs``), and the
    # learning-rate schedule (None: TRL's linear decay). None: measured at the end only.
    checkpoints: tuple[float, ...] | None = None
    lr_scheduler_type: str | None = None
    # Evaluation.
    test_prompts: int = 128
    samples_per_prompt: int = 2
    max_new_tokens: int = 128
    eval_dtype: str = "bfloat16"
    # Prompts generated together; batch b is seeded seed + b, so a study measured on the first test prompts of a
    # shared set-up is paired with its SFT samples when its prompts fill whole batches.
    generation_batch_size: int = 32
    # β chosen from the pilot by KL alone (never by the gold gain): each main arm written without a β takes, among the
    # pilot arms of its method and label setting, the β whose mean KL(π‖π_ref) at the end of training was closest to
    # this many nats (on a log scale). None: every arm's β is the design's or its own.
    target_kl: float | None = None
    # Or β chosen from the pilot by its gold gain at this checkpoint epoch: each main arm written without a β takes,
    # among the pilot arms of its method, label setting and rows, the β whose mean gold gain there was largest (a
    # set-up where the method first gains; the main run's fresh seeds then measure it). None: no such rule.
    beta_by_gain_at: float | None = None
    # Another study's results folder whose cell records (pilot/, main/) this study reuses where an arm and seed match:
    # the same set-up (setup_from), rows, labels and release, so the cells pair.
    cells_from: str | None = None
    # Cells measured under different evaluations (records' ``evaluation``: prompts, samples, lengths, batch, dtype,
    # checkpoints) are paired only if this says they measure the same thing (a reason belongs in ``notes``).
    evaluations_equivalent: bool = False
    # Pilot, power and budget.
    pilot_seeds: tuple[int, ...] = (1000, 1001, 1002)
    pilot_arms: tuple[Arm, ...] = PILOT_ARMS
    main_arms: tuple[Arm, ...] = MAIN_ARMS
    #: The pilot's go/no-go rule (:class:`Gate`); None: the main run always follows the pilot.
    pilot_gate: Gate | None = None
    effect_points: float = 2.0  # the effect the power step is sized for, in the claims' metric (win: points)
    # The claims (None: the first study's CLAIMS); each names arms of main_arms.
    claims: tuple[Claim, ...] | None = None
    # Readings that combine claims (Conclusion), each stated as shown or not in the report. None: none.
    conclusions: tuple[Conclusion, ...] | None = None
    # Pre-registered secondary readings: claims on main arms reported at α on their raw p, outside Holm's correction
    # and the power step (e.g. whether a fall survives without degenerate samples). They decide no claim.
    secondary: tuple[Claim, ...] | None = None
    power: float = 0.8
    alpha: float = 0.05
    budget_hours: float = 7.5
    # The main run's first seed: a study that must not reuse an earlier study's seeds (fresh seeds) names its own.
    main_seeds_from: int = 0
    # The fewest main seeds the plan takes, whatever the power step or the budget says (fixed before the pilot).
    min_seeds: int = 2
    notes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.label_source not in ("dataset", "argmax", "bt"):
            raise ValueError(f"label_source must be dataset, argmax or bt (got {self.label_source!r}).")
        if self.samples_per_prompt < 1 or self.test_prompts < 2:
            raise ValueError("samples_per_prompt must be ≥ 1 and test_prompts ≥ 2.")
        keys = {a.key for a in self.main_arms}
        for what, named in (("claims", self.claims), ("secondary readings", self.secondary)):
            unknown = sorted({arm for c in named or () for arm in c.arms} - keys)
            if unknown:
                raise ValueError(
                    f"{what} name arms that are not in main_arms: {unknown} (the arms are {sorted(keys)})."
                )
        names = {c.name for c in self.all_claims}
        for reading in self.conclusions or ():
            missing = sorted(set(reading.holds + reading.not_reversed) - names)
            if missing:
                raise ValueError(f"conclusion {reading.name!r} names claims that are not in claims: {missing}.")
        whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (self.min_seeds, self.main_seeds_from))
        if not whole or self.min_seeds < 2 or self.main_seeds_from < 0:
            raise ValueError(
                f"min_seeds must be a whole number ≥ 2 and main_seeds_from one ≥ 0 (got {self.min_seeds!r}, "
                f"{self.main_seeds_from!r})."
            )
        gate_epoch = None if self.pilot_gate is None else self.pilot_gate.epoch
        if gate_epoch is not None and gate_epoch not in (self.checkpoints or ()):
            raise ValueError(
                f"pilot_gate.epoch {gate_epoch:g} is not one of the design's checkpoints "
                f"({list(self.checkpoints or ())}); read the gate at a checkpoint the cells are measured at."
            )
        if self.target_kl is not None and self.beta_by_gain_at is not None:
            raise ValueError("give target_kl or beta_by_gain_at, not both: each is a rule for the β of a main arm.")
        if self.beta_by_gain_at is not None and self.beta_by_gain_at not in (self.checkpoints or ()):
            raise ValueError(
                f"beta_by_gain_at {self.beta_by_gain_at:g} is not one of the design's checkpoints "
                f"({list(self.checkpoints or ())}): the gain is read at a checkpoint the cells are measured at."
            )
        # A gate may name a main arm whose β a rule chooses: it reads the pilot arm chosen for it.
        chosen = {a.key for a in self.main_arms if a.beta is None} if self.chooses_beta else set()
        if self.pilot_gate is not None and self.pilot_gate.arm not in {a.key for a in self.pilot_arms} | chosen:
            raise ValueError(
                f"pilot_gate names arm {self.pilot_gate.arm!r}, which is not a pilot arm "
                f"(the pilot arms are {sorted(a.key for a in self.pilot_arms)})."
            )
        units = {is_win_rate(c.metric) for c in self.claims or ()}
        if len(units) > 1:  # the plan has one effect size and one MDE: the power step pools the claims' SDs
            raise ValueError(
                f"claims mix win-rate and gain metrics ({sorted({c.metric for c in self.claims})}): the plan has one "
                "effect size and one MDE, in one unit; put the win-rate claims and the gain claims in two designs."
            )
        if any(c.kind != "arms" for c in self.claims or ()) and self.checkpoints is None:
            raise ValueError(
                "drop and matched_kl claims read checkpoints along training: give the design checkpoints."
            )
        marks = None if self.checkpoints is None else list(self.checkpoints)
        if marks is not None and (marks != sorted(set(marks)) or marks[-1] != self.epochs):
            raise ValueError(f"checkpoints must be increasing epochs ending at epochs={self.epochs:g} (got {marks}).")

    @property
    def chooses_beta(self) -> bool:
        """Whether main arms written without a β take one from the pilot (``target_kl`` or ``beta_by_gain_at``)."""
        return self.target_kl is not None or self.beta_by_gain_at is not None

    @property
    def all_claims(self) -> tuple[Claim, ...]:
        return CLAIMS if self.claims is None else self.claims

    @property
    def effect_unit(self) -> str:
        """The unit of ``effect_points`` and of the plan's MDE: win-rate points, or r* when no claim is on a win."""
        return "points" if any(is_win_rate(c.metric) for c in self.all_claims) else "r*"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("pilot_arms", "main_arms"):
            out[key] = [asdict(a) for a in getattr(self, key)]
        for key in ("claims", "conclusions", "secondary"):
            if getattr(self, key) is not None:
                out[key] = [asdict(c) for c in getattr(self, key)]
        out["pilot_seeds"] = list(self.pilot_seeds)
        if self.checkpoints is not None:
            out["checkpoints"] = list(self.checkpoints)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyDesign:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown study design fields {unknown}; the fields are {sorted(known)}.")
        data = dict(data)
        for key in ("pilot_arms", "main_arms"):
            if key in data:
                data[key] = tuple(Arm(**a) if isinstance(a, dict) else a for a in data[key])
        for key, kind in (("claims", Claim), ("conclusions", Conclusion), ("secondary", Claim)):
            if data.get(key) is not None:
                data[key] = tuple(kind(**c) if isinstance(c, dict) else c for c in data[key])
        if isinstance(data.get("pilot_gate"), dict):
            extra = sorted(set(data["pilot_gate"]) - {f.name for f in fields(Gate)})
            if extra:
                raise ValueError(
                    f"pilot_gate: unknown fields {extra}; its fields are arm, metric, at_least, why and epoch."
                )
            data["pilot_gate"] = Gate(**data["pilot_gate"])
        for key in ("pilot_seeds", "checkpoints"):
            if data.get(key) is not None:
                data[key] = tuple(data[key])
        return cls(**data)


#: The fields that make a set-up (SFT policy, gold judge, the SFT policy's samples): studies sharing one agree on them.
SETUP_FIELDS = (
    "base_model", "sft_data", "sft_rows", "sft_epochs", "sft_learning_rate", "sft_lora_r", "judge_rows",
    "batch_size", "max_length", "bf16", "test_prompts", "samples_per_prompt", "max_new_tokens", "eval_dtype",
    "generation_batch_size",
)  # fmt: skip


def load_design(path: str | None) -> StudyDesign:
    """The default design, or a YAML file of :class:`StudyDesign` fields on top of it."""
    if path is None:
        return StudyDesign()
    import yaml

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--design {file}: no such file; give a YAML file of StudyDesign fields.")
    spec = yaml.safe_load(file.read_text()) or {}
    base = StudyDesign().to_dict()
    base.update({"name": file.stem, **spec})
    return StudyDesign.from_dict(base)


def arm_epsilon_text(arm: Arm) -> str:
    return "∞" if arm.epsilon is None or math.isinf(arm.epsilon) else f"{arm.epsilon:g}"


def with_sizes(design: StudyDesign, **changes) -> StudyDesign:
    return replace(design, **changes)


def refuse_emulated_bf16(design: StudyDesign, allowed: bool = False, *, bf16_kernels: bool | None = None) -> None:
    """A design that trains or measures in bf16, on a CPU without bf16 kernels (a cell's step took minutes there, and
    bf16 rounds unlike the study's other cells): refused before anything trains, unless ``allowed``
    (``--allow-emulated-bf16``). ``bf16_kernels``: whether this machine has them (None: an accelerator, or a CPU
    whose kernels run bf16 natively, as found here)."""
    from squarechipo.models.runtime import accelerator_available, cpu_runs_bf16_natively

    settings = (("bf16: true", design.bf16), ("eval_dtype: bfloat16", design.eval_dtype == "bfloat16"))
    wanted = [name for name, on in settings if on]
    if not wanted or allowed:
        return
    if bf16_kernels is None:
        bf16_kernels = accelerator_available() or cpu_runs_bf16_natively()
    if bf16_kernels:
        return
    raise ValueError(
        f"study {design.name!r}: its design sets {' and '.join(wanted)}, and this CPU has no bf16 kernels "
        "(`squarechipo env`: CPU bf16 kernels: no), where a cell takes several times as long and rounds bf16 "
        "unlike cells trained with them. Run the study on a machine with bf16 kernels or a GPU, or pass "
        "--allow-emulated-bf16."
    )
