"""The central-DP policy selector (Zhou et al. 2025 (Square-χPO), Algorithm 2): candidates + private data → one
released policy.

Every process scores its shard of the private rows (:mod:`squarechipo.select.scoring`), the losses
are summed across processes, the main process samples one index with
:func:`squarechipo.select.exponential.select_index` and broadcasts it. Only the index leaves this
module, with public metadata (ε, n, |Π|, the guard overrides); losses and probabilities are private.

The sampling seed defaults to OS entropy. A known seed makes the noise known and voids the
guarantee, so a fixed ``seed`` is for tests and simulations only and is recorded in the ledger.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import numpy as np
import torch
from accelerate.utils import broadcast_object_list
from transformers import AutoTokenizer

from squarechipo.data.fingerprint import training_data_record
from squarechipo.data.label_roles import releases_labels
from squarechipo.losses import LINKS, margin_clip
from squarechipo.models import resolve_model_path
from squarechipo.models.logprobs import tokenize_preferences
from squarechipo.models.runtime import distributed_state
from squarechipo.privacy.door import mechanism_input
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.mechanisms.calibration import check_epsilon
from squarechipo.privacy.provenance.lineage import ModelLineage, check_lineage
from squarechipo.privacy.provenance.record import (
    PRIVACY_FILE,
    PrivacyRecord,
    read_privacy_record,
    write_privacy_record,
)
from squarechipo.select.candidates import Candidate, check_candidates, load_candidate
from squarechipo.select.exponential import ROW_LOSS_SENSITIVITY, select_index
from squarechipo.select.scoring import _score_candidates

__all__ = ["Selection", "select_policy", "STAGE"]

STAGE = "central_selection"
_NOT_COPIED = {PRIVACY_FILE, "README.md", "trainer_state.json", "training_args.bin"}


@dataclass(frozen=True)
class Selection:
    """The public outcome: which candidate was released, and the parameters of the release."""

    index: int
    candidate: str
    output_dir: str | None
    epsilon: float
    num_rows: int
    num_candidates: int
    candidates: tuple[str, ...] = ()
    guard_overrides: list[dict] = field(default_factory=list)
    #: The reference model's lineage finding (:mod:`squarechipo.privacy.provenance.lineage`); public.
    reference_lineage: dict = field(default_factory=dict)


def _check_arguments(candidates, epsilon, beta, r_max, link, batch_size) -> None:
    if len(candidates) < 2:
        raise ValueError(f"candidates: give at least two policies to select from (got {len(candidates)}).")
    if len(set(candidates)) != len(candidates):
        raise ValueError("candidates: a candidate is listed twice; list each policy once.")
    check_epsilon(epsilon, finite=True)
    if not (isinstance(beta, (int, float)) and beta > 0):
        raise ValueError(f"beta must be positive (got {beta!r}); use the β the candidates were trained with.")
    if r_max is not None and not r_max > 0:
        raise ValueError(f"r_max must be positive or None (got {r_max!r}).")
    if link not in LINKS:
        raise ValueError(f"link must be one of {tuple(LINKS)} (got {link!r}); chipo is Square-χPO's link.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1 (got {batch_size}).")


def _check_output_dir(output_dir: Path | None) -> None:
    record = read_privacy_record(output_dir) if output_dir is not None else None
    if record is not None and record.stage == STAGE:
        raise FileExistsError(
            f"output_dir {output_dir} already holds a central selection. Selecting again on the same data draws "
            "fresh noise and spends another ε (basic composition): keep the existing result, or choose a new "
            "output_dir and account for the total ε yourself."
        )


def _private_choice(
    pool: list[Candidate],
    ref_model: str,
    reference_path,
    private_dataset,
    state,
    *,
    epsilon,
    seed,
    dtype,
    score_kwargs,
) -> int:
    """Score this process's shard, sum across processes, sample one index on the main process and broadcast it.

    Only the index leaves this function: the losses are private and are dropped here.
    """
    tokenizer = AutoTokenizer.from_pretrained(reference_path)
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    shard = private_dataset.shard(num_shards=state.num_processes, index=state.process_index, contiguous=True)
    mechanism = "the exponential mechanism (central DP, Zhou et al. 2025 (Square-χPO), Alg. 2): only its index leaves"
    rows = tokenize_preferences(mechanism_input(shard, mechanism), tokenizer)
    device = state.device
    reference = Candidate(name=ref_model, path=Path(reference_path), record=None)
    totals = _score_candidates(
        rows,
        lambda: load_candidate(reference, dtype=dtype, device=device),
        [lambda c=c: load_candidate(c, dtype=dtype, device=device) for c in pool],
        pad_token_id=pad_token_id,
        is_reference=[c.path.resolve() == reference.path.resolve() for c in pool],
        **score_kwargs,
    )
    chosen = [None]
    if state.is_main_process:
        chosen[0] = select_index(totals.numpy(), epsilon, np.random.default_rng(seed))
    del totals
    return int(broadcast_object_list(chosen, from_process=0)[0])


def score_settings(beta, link, r_max, max_length, truncation_mode, batch_size) -> dict:
    """How the selector scores candidates: the trainer's β, link and margin clip (:func:`~squarechipo.losses.
    margin_clip`, the one definition), so a candidate is scored on the margins its training saw."""
    return {
        "beta": beta,
        "link": link,
        "clip": margin_clip(r_max),
        "max_length": max_length,
        "truncation_mode": truncation_mode,
        "batch_size": batch_size,
    }


@releases_labels("central DP: the exponential mechanism stands between the raw labels and the one choice it releases")
def select_policy(
    candidates: list[str],
    ref_model: str,
    private_dataset: datasets.Dataset,
    *,
    epsilon: float,
    beta: float = 0.1,
    r_max: float | None = 5.0,
    link: str = "chipo",
    max_length: int | None = 512,
    truncation_mode: str = "keep_start",
    batch_size: int = 8,
    dtype: torch.dtype | None = torch.float32,
    output_dir: str | None = None,
    seed: int | None = None,
    allow_unrecorded_candidates: bool = False,
    override_candidate_guard: bool = False,
    override_reference_guard: bool = False,
) -> Selection:
    """Sample one candidate with P ∝ exp(−ε·L/8), L the square loss on the raw private labels
    (Zhou et al. 2025 (Square-χPO), Alg. 2).

    The score h depends on π_ref, so the reference is checked like the candidates: one trained on the
    private rows or their prompts voids the sensitivity argument and is refused unless
    ``override_reference_guard`` (recorded). A reference without a record (a public base model) is
    accepted and recorded as unrecorded.
    """
    # Long: checks, both guards, the private choice and the saved record are one audited sequence; each step is
    # a helper above, and splitting the sequence would scatter what the guarantee depends on.
    _check_arguments(candidates, epsilon, beta, r_max, link, batch_size)
    out = Path(output_dir) if output_dir is not None else None
    _check_output_dir(out)
    pool = [Candidate.from_name(name) for name in candidates]
    findings = check_candidates(
        pool, private_dataset, allow_unrecorded=allow_unrecorded_candidates, override_overlap=override_candidate_guard
    )
    reference_path = resolve_model_path(ref_model)
    reference_report = check_lineage(
        [("reference", ModelLineage.from_folder(reference_path, name=ref_model))],
        private_dataset,
        private=True,
        override=override_reference_guard,
        override_field="override_reference_guard",
        context="select_policy",
    )
    state = distributed_state()
    score = score_settings(beta, link, r_max, max_length, truncation_mode, batch_size)
    index = _private_choice(
        pool,
        ref_model,
        reference_path,
        private_dataset,
        state,
        epsilon=epsilon,
        seed=seed,
        dtype=dtype,
        score_kwargs=score,
    )
    n = len(private_dataset)
    selection = Selection(
        index=index,
        candidate=candidates[index],
        output_dir=str(out) if out is not None else None,
        epsilon=float(epsilon),
        num_rows=n,
        num_candidates=len(pool),
        candidates=tuple(candidates),
        guard_overrides=[asdict(f) for f in findings],
        reference_lineage=reference_report.findings[0].to_dict(),
    )
    if out is not None and state.is_main_process:
        _save_selection(
            selection,
            pool[index],
            out,
            record_extra={
                # The selected model was chosen with the private rows: its record names them, so no later run
                # starts from it on the same rows unchecked (nor selects it again as a candidate).
                **training_data_record(private_dataset),
                **reference_report.record(),
                "upstream": list(reference_report.upstream)
                + ModelLineage(pool[index].name, pool[index].record).upstream_entries("selected candidate"),
                **{key: score[key] for key in ("beta", "link", "max_length")},
                "r_max": r_max,
                "sensitivity": ROW_LOSS_SENSITIVITY,
                "seeded": seed is not None,
                "private_data_ledger": (ledger.to_dict() if (ledger := get_ledger(private_dataset)) else None),
            },
        )
    state.wait_for_everyone()
    return selection


def _save_selection(selection: Selection, candidate: Candidate, out: Path, record_extra: dict) -> None:
    """Copy the chosen policy and write its record and card (public fields only)."""
    out.mkdir(parents=True, exist_ok=True)
    for item in candidate.path.iterdir():
        # The model, adapter and tokenizer files only: no checkpoints, released data or training state.
        if item.is_file() and item.name not in _NOT_COPIED and not item.name.endswith("_results.json"):
            shutil.copy2(item, out / item.name)
    record = PrivacyRecord.build(
        {
            "stage": STAGE,
            "mechanism": "exponential",
            "epsilon": selection.epsilon,
            "num_rows": selection.num_rows,
            "num_candidates": selection.num_candidates,
            "candidates": list(selection.candidates),
            "selected_index": selection.index,
            "selected": selection.candidate,
            "guard_overrides": selection.guard_overrides,
            "candidate_record": candidate.record,
            **record_extra,
        }
    )
    intro = (
        "This model is one of a finite set of candidate policies, released by the exponential mechanism on a "
        "private preference dataset with [squarechipo](https://pypi.org/project/squarechipo/). Only the choice "
        "depends on the private data; the candidates' scores were never stored."
    )
    write_privacy_record(out, record, intro=intro, card_header=_CARD_HEADER)


_CARD_HEADER = (
    "---\nlibrary_name: transformers\ntags:\n- squarechipo\n- differential-privacy\n---\n\n"
    "# Policy selected under central differential privacy (squarechipo)"
)
