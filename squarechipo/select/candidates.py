"""Candidate policies for the central selector: loading and the training-data guard.

A candidate is a saved model folder, a PEFT adapter folder (``adapter_config.json``; loaded on its base model and
merged for scoring), or the alias ``embedded``. The exponential mechanism is ε-DP only if the candidate set was chosen
without the private data (Zhou et al. 2025 (Square-χPO), Algorithm 2), so every candidate must carry the record
squarechipo writes next to the models it trains (``squarechipo_privacy.json``: the label-invariant fingerprint of its
preference data, a bottom-k sketch of its prompts, and the same for the models it started from). The guard
(:mod:`squarechipo.privacy.provenance.lineage`, transitively through ``upstream``) refuses a candidate whose own or
upstream fingerprint equals the private data's or whose sketched prompts occur in the private data, and a candidate
with no record. Each refusal can be overridden, and every override is written into the selected model's ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from squarechipo.data.label_roles import label_free
from squarechipo.models import resolve_model_path
from squarechipo.privacy.provenance.lineage import PRIVACY_FILE, UNRECORDED, ModelLineage, lineage_findings

__all__ = ["Candidate", "GuardFinding", "check_candidates", "load_candidate"]

ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class Candidate:
    """One policy of the finite class Π: where it is and what it recorded about its training data."""

    name: str
    path: Path
    record: dict | None

    @classmethod
    def from_name(cls, name: str) -> Candidate:
        path = Path(resolve_model_path(name))
        if not path.is_dir():
            raise ValueError(
                f"candidates: {name!r} is not a local model folder. Pass saved model or adapter folders "
                "(Hub ids must be downloaded first: the selector only reads local files)."
            )
        return cls(name=name, path=path, record=ModelLineage.from_folder(path).record)

    @property
    def is_adapter(self) -> bool:
        return (self.path / ADAPTER_CONFIG).exists()


@dataclass(frozen=True)
class GuardFinding:
    """Why a candidate failed the guard (public: names the candidate and the rule, never private data)."""

    candidate: str
    reason: str  # "no_record", "same_dataset", "prompt_overlap"

    def message(self) -> str:
        return {
            "no_record": f"{self.candidate}: no {PRIVACY_FILE} records what it was trained on",
            "same_dataset": f"{self.candidate}: was trained on the private dataset (same fingerprint)",
            "prompt_overlap": f"{self.candidate}: was trained on prompts that occur in the private dataset",
        }[self.reason]


@label_free("compares candidates' label-invariant training records with the private rows")
def check_candidates(
    candidates: list[Candidate],
    private: datasets.Dataset,
    *,
    allow_unrecorded: bool = False,
    override_overlap: bool = False,
) -> list[GuardFinding]:
    """Refuse candidates trained on the private data; return the overridden findings for the ledger."""
    lineages = [("candidate", ModelLineage(candidate.name, candidate.record)) for candidate in candidates]
    findings = [
        GuardFinding(finding.model, "no_record" if finding.status == UNRECORDED else finding.status)
        for finding in lineage_findings(lineages, private)
        if finding.status == UNRECORDED or finding.exposes_labels
    ]
    blocking = [
        f
        for f in findings
        if (f.reason == "no_record" and not allow_unrecorded) or (f.reason != "no_record" and not override_overlap)
    ]
    if blocking:
        lines = "\n  ".join(f.message() for f in blocking)
        raise ValueError(
            "The exponential mechanism is ε-DP only when the candidates were chosen without the private data "
            f"(Zhou et al. 2025 (Square-χPO), Algorithm 2), and the guard refused:\n  {lines}\n"
            "Remove these candidates. If a candidate without a record is known to be independent of the private "
            "data (e.g. a public base model), set allow_unrecorded_candidates; set override_candidate_guard only "
            "if you accept that the guarantee does not hold. Either override is written into the output's ledger."
        )
    return findings


def load_candidate(candidate: Candidate, *, dtype: torch.dtype | None, device: torch.device) -> PreTrainedModel:
    """Load a full model, or an adapter on its base model merged for inference."""
    if not candidate.is_adapter:
        return AutoModelForCausalLM.from_pretrained(candidate.path, dtype=dtype).to(device)
    from peft import PeftConfig, PeftModel

    base_name = PeftConfig.from_pretrained(candidate.path).base_model_name_or_path
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path(base_name), dtype=dtype)
    return PeftModel.from_pretrained(base, candidate.path).merge_and_unload().to(device)
