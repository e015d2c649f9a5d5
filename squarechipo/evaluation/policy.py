"""Low-variance measures of a trained policy against the SFT policy under a gold reward r*, paired by prompt.

For each held-out test prompt, K responses are sampled from the policy at temperature 1 with the whole vocabulary
(so the samples come from π itself; :class:`~squarechipo.models.generation.ExponentialRaceSampler`), with fixed
seeds: sample k of every policy uses the same random clocks, which couples a policy's samples with the SFT policy's
(common random numbers). Per policy it records, per prompt:

- r*(x, y) of each sample, the sample's length in words, whether it loops (:func:`~.gold.has_loop`) and whether it
  is degenerate (it loops or holds a non-word, :mod:`~.degenerate`);
- log π(y|x) and log π_ref(y|x) of each sample: their mean difference estimates KL(π‖π_ref) (the samples are
  decoded and re-tokenized with the chat template, as the trainer tokenizes);
- log π of the test pair's two responses: with π_ref's, the implicit-reward accuracy on the clean test pairs;
- log π of a fixed candidate pool per prompt (the test pair and the SFT policy's samples): the generation-free
  value Σ_j softmax(log π(pool))_j · r*(pool_j).

:func:`compare` turns a policy's record and the SFT policy's into per-prompt paired differences and their means.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np
import torch
from scipy.special import expit, softmax

from squarechipo.data.text import prompt_text, response_text
from squarechipo.evaluation.degenerate import DegenerateText, degenerate_flags
from squarechipo.evaluation.gold import gold_rewards, has_loop
from squarechipo.judge.reward_model import RewardModelJudge
from squarechipo.models.generation import generate_with_model
from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences
from squarechipo.privacy.door import CheckedRows, checked_rows, reads_labels, require_checked, rows_without_labels
from squarechipo.stats import paired_test, share_explained

__all__ = ["SamplingSettings", "GoldEvaluator", "compare"]


@dataclass(frozen=True)
class SamplingSettings:
    """K samples per prompt at temperature 1, whole vocabulary; sample k is drawn with seeds ``seed + 1000·k``.
    ``generation_free``: also the measures that need no sample of the policy (the implicit-reward accuracy on the
    test pairs and the pool value); off, each policy has two log-prob passes fewer and they are not reported."""

    samples_per_prompt: int = 2
    max_new_tokens: int = 128
    batch_size: int = 32
    logp_batch_size: int = 16
    seed: int = 0
    generation_free: bool = True


def _as_messages(response: str) -> list[dict]:
    return [{"role": "assistant", "content": response}]


def _pair_row(row: dict) -> dict:
    """One test pair in the collator's layout."""
    return _pairs([row["prompt"]], [row["chosen"]], [row["rejected"]])[0]


def _pairs(prompts: list, first: list, second: list) -> list[dict]:
    """Rows of two responses per prompt in the collator's layout (strings become assistant messages)."""
    return [
        {
            "prompt": p,
            "chosen": a if isinstance(a, list) else _as_messages(a),
            "rejected": b if isinstance(b, list) else _as_messages(b),
        }
        for p, a, b in zip(prompts, first, second)
    ]


class GoldEvaluator:
    """Measures policies on ``test`` (prompt/chosen/rejected rows) against ``reference`` under the gold reward."""

    @reads_labels("test", public="labels_public", reader="GoldEvaluator (implicit-reward accuracy on test pairs)")
    def __init__(
        self,
        reference,
        tokenizer,
        gold: RewardModelJudge,
        test: datasets.Dataset,
        settings=None,
        *,
        labels_public=False,
    ):
        self.reference, self.tokenizer, self.gold = reference, tokenizer, gold
        self.settings = settings or SamplingSettings()
        self.prompts = list(test["prompt"])
        #: The test pairs as the door checked them (released, or declared public); every method reads them through
        #: require_checked, so pairs assigned by hand afterwards are refused.
        self.pairs = checked_rows(
            test.select_columns(["prompt", "chosen", "rejected"]), split="test", public=labels_public,
            reader="GoldEvaluator", declare="labels_public=True",
        )  # fmt: skip
        self.collator = preference_collator(tokenizer)
        chosen, rejected = self._pair_texts()  # the words of both responses: what a label decides is not in them
        self.degenerate = DegenerateText([*map(prompt_text, self.prompts), *chosen, *rejected])

    def sample(self, model) -> list[list[str]]:
        """K lists of one response per prompt."""
        s = self.settings
        return [
            generate_with_model(
                model,
                self.tokenizer,
                self.prompts,
                max_new_tokens=s.max_new_tokens,
                batch_size=s.batch_size,
                exact_sampling=True,
                seed=s.seed + 1000 * k,
                desc=f"sample {k + 1}/{s.samples_per_prompt}",
            )
            for k in range(s.samples_per_prompt)
        ]

    def logps(self, model, first: list, second: list) -> np.ndarray:
        """(2, n) summed log-probs of two responses per prompt (strings or messages) the policies sampled, each
        prompt run once."""
        rows = rows_without_labels(_pairs(self.prompts, first, second), "two samples of policies per prompt")
        return self._logps(model, rows)

    def test_logps(self, model) -> np.ndarray:
        """(2, n) summed log-probs of each test pair's chosen and rejected responses (checked at construction)."""
        pairs = require_checked(self.pairs, "GoldEvaluator.test_logps")
        return self._logps(model, pairs.map(_pair_row))

    def _logps(self, model, rows: CheckedRows) -> np.ndarray:
        tokenized = tokenize_preferences(rows, self.tokenizer)
        with torch.no_grad():
            return model_logps(model, tokenized, self.collator, self.settings.logp_batch_size, "log-probs").numpy()

    def _pair_texts(self) -> tuple[list[str], list[str]]:
        """The texts of each test pair's chosen and rejected responses (checked at construction)."""
        pairs = require_checked(self.pairs, "GoldEvaluator")
        return [response_text(p["chosen"]) for p in pairs], [response_text(p["rejected"]) for p in pairs]

    def _sample_logps(self, model, samples: list[list[str]]) -> np.ndarray:
        """(K, n) log-probs of the samples, two samples per scoring row; an odd last sample is scored beside an empty
        response (a few template tokens, its log-prob dropped) rather than beside itself, which cost a second pass
        over every sample."""
        out = []
        for k in range(0, len(samples), 2):
            if k + 1 < len(samples):
                out.extend(self.logps(model, samples[k], samples[k + 1]))
            else:
                out.append(self.logps(model, samples[k], [""] * len(samples[k]))[0])
        return np.stack(out)

    def measure(self, model, pool: list[list[str]] | None = None) -> dict:
        """The per-prompt record of ``model`` on its own samples (see :meth:`measure_samples`)."""
        return self.measure_samples(model, self.sample(model), pool)

    def measure_samples(self, model, samples: list[list[str]], pool: list[list[str]] | None = None) -> dict:
        """The per-prompt record of ``model`` (lists of floats, JSON-ready) on ``samples`` drawn from it.
        ``pool``: the SFT policy's samples, the extra candidates of the fixed pool (None: this model is the SFT
        policy and its samples are the pool)."""
        record = {
            "reward": np.stack([gold_rewards(self.gold, self.prompts, s) for s in samples]),
            "words": np.array([[len(r.split()) for r in s] for s in samples], dtype=float),
            "loop": np.array([[has_loop(r) for r in s] for s in samples], dtype=float),
            "degenerate": np.array(degenerate_flags(self.degenerate, samples)),
        }
        # The reference's KL to itself is 0 and a comparison reads only its rewards, lengths and loops: its samples'
        # log-probs are needed only for the generation-free measures (its own pool value).
        if model is not self.reference or self.settings.generation_free:
            logp = self._sample_logps(model, samples)
            # The reference's own record: the same pass (its log-probs are the reference's).
            ref = logp if model is self.reference else self._sample_logps(self.reference, samples)
            record |= {"logp": logp, "logp_ref": ref}
        if self.settings.generation_free:
            test_logps = self.test_logps(model)
            record["test_logp"] = test_logps
            # Without a pool the model's own samples are the pool: their log-probs are the pass above.
            record["pool_logp"] = np.concatenate(
                [test_logps, logp if pool is None else self._sample_logps(model, pool)]
            )
        out = {k: v.tolist() for k, v in record.items()}
        # Which samples are the same text (a tie by definition, whatever rounding did to their two rewards).
        out["sample_digest"] = [[sample_digest(r) for r in s] for s in samples]
        out["examples"] = [samples[0][i] for i in range(min(4, len(self.prompts)))]
        return out

    def constants(self, sft_samples: list[list[str]], sft_record: dict | None = None) -> dict:
        """What every comparison shares: π_ref's log-probs on the test pairs, r* of the test pairs (their clean
        label is argmax r*) and r* of the fixed pool (test pair + the SFT policy's samples). ``sft_record``, the
        SFT policy's record on these samples, already holds r* of the samples and π_ref's test log-probs: they
        are taken from it instead of being computed again. Empty without the generation-free measures."""
        if not self.settings.generation_free:
            return {}
        chosen, rejected = self._pair_texts()
        pair_rewards = np.stack(
            [gold_rewards(self.gold, self.prompts, chosen), gold_rewards(self.gold, self.prompts, rejected)]
        )
        if sft_record is None:
            sample_rewards = np.stack([gold_rewards(self.gold, self.prompts, s) for s in sft_samples])
            ref_test = self.test_logps(self.reference)
        else:
            sample_rewards, ref_test = np.asarray(sft_record["reward"]), np.asarray(sft_record["test_logp"])
        pool_rewards = np.concatenate([pair_rewards, sample_rewards])
        return {
            "ref_test_logp": ref_test.tolist(),
            "pair_reward": pair_rewards.tolist(),
            "pool_reward": pool_rewards.tolist(),
        }


def _pool_value(pool_logp: np.ndarray, pool_reward: np.ndarray) -> np.ndarray:
    """Per prompt Σ_j softmax(log π(pool))_j · r*(pool_j); arrays are (pool size, prompts)."""
    return (softmax(pool_logp, axis=0) * pool_reward).sum(axis=0)


def _without_degenerate(delta: np.ndarray, policy: np.ndarray, sft: np.ndarray) -> dict:
    """The degenerate shares, and the gold gain over the sample pairs (k, prompt) where neither response is degenerate:
    per prompt the mean over its clean pairs; a prompt with none is left out (``clean_prompts`` says how many stay)."""
    clean = (policy == 0) & (sft == 0)
    kept = clean.any(axis=0)
    per_prompt = (delta * clean).sum(axis=0)[kept] / clean.sum(axis=0)[kept]
    gain = paired_test(per_prompt).to_dict() if kept.sum() >= 2 else None
    return {
        "degenerate_rate": float(policy.mean()),
        "sft_degenerate_rate": float(sft.mean()),
        "gold_gain_clean": gain,
        "clean_prompts": int(kept.sum()),
    }


#: Fields of a record that are not per-sample figures.
_NOT_FIGURES = ("examples", "sample_digest")


def sample_digest(text: str) -> str:
    """A short digest of a sample's text: equal digests, equal texts (the same response to the same prompt)."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def hard_wins(delta: np.ndarray, policy_digests=None, sft_digests=None) -> np.ndarray:
    """Per sample: 1 where the policy's sample has the higher gold reward, 0 where lower, ½ on a tie. A tie is equal
    rewards, or the same text (coupled samples of a policy close to the SFT policy often are): two identical
    responses scored in different batches can differ in the last bits of their rewards, which would count a tie as
    a win or a loss. Records written before samples carried digests tie on equal rewards alone."""
    tie = delta == 0
    if policy_digests is not None and sft_digests is not None:
        tie = tie | (np.asarray(policy_digests) == np.asarray(sft_digests))
    return np.where(tie, 0.5, (delta > 0).astype(np.float64))


def compare(policy: dict, sft: dict, constants: dict) -> dict:
    """Paired-by-prompt differences of ``policy`` against ``sft`` (records of :meth:`GoldEvaluator.measure`).

    Per prompt: the gold gain (mean r* of the policy's samples − the SFT's), the expected win rate
    mean_k σ(r*(y_π,k) − r*(y_sft,k)) and the hard one (ties ½), the KL estimate, the length difference and the
    pool-value gain. Returns each mean with a t interval over prompts, the implicit-reward accuracy, the
    repetition rates, the degenerate shares and the gold gain without degenerate samples (records that have them:
    :func:`_without_degenerate`), and the regression of the gain on the length difference.
    """
    a = {k: np.asarray(v, dtype=np.float64) for k, v in policy.items() if k not in _NOT_FIGURES}
    b = {k: np.asarray(v, dtype=np.float64) for k, v in sft.items() if k not in _NOT_FIGURES}
    delta = a["reward"] - b["reward"]
    per_prompt = {
        "gold_gain": delta.mean(axis=0),
        "expected_win": expit(delta).mean(axis=0),
        "hard_win": hard_wins(delta, policy.get("sample_digest"), sft.get("sample_digest")).mean(axis=0),
        "kl": (a["logp"] - a["logp_ref"]).mean(axis=0),
        "length_difference": (a["words"] - b["words"]).mean(axis=0),
    }
    generation_free = "pool_logp" in a and "pool_reward" in constants
    if generation_free:
        pool_reward = np.asarray(constants["pool_reward"])
        per_prompt["pool_gain"] = _pool_value(a["pool_logp"], pool_reward) - _pool_value(b["pool_logp"], pool_reward)
    summary = {name: paired_test(values).to_dict() for name, values in per_prompt.items()}
    if generation_free:
        ref = np.asarray(constants["ref_test_logp"])
        first_better = np.asarray(constants["pair_reward"])[0] >= np.asarray(constants["pair_reward"])[1]
        implied = (a["test_logp"][0] - ref[0]) - (a["test_logp"][1] - ref[1])
        summary["implicit_accuracy"] = float(np.mean((implied > 0) == first_better))
    summary["loop_rate"] = float(a["loop"].mean())
    summary["sft_loop_rate"] = float(b["loop"].mean())
    if "degenerate" in a and "degenerate" in b:
        summary |= _without_degenerate(delta, a["degenerate"], b["degenerate"])
    summary["words"] = float(a["words"].mean())
    summary["length_regression"] = share_explained(per_prompt["gold_gain"], per_prompt["length_difference"])
    return summary
