"""``BestOfKRewardTrainer``: a reward model from released best-of-K rows (Chua et al. 2024 (local label DP) analyzer +
top-1 Plackett–Luce).

Rows come from :func:`squarechipo.privacy.release.transaction.release_dataset` with a K-ary measurement: ``prompt``,
``responses`` (K per row) and ``label_weights`` — the unbiased analyzer weights of the K-RR or subset release (E[a | y]
= one_hot(y)). The loss is −Σ_k a_k·log softmax(r(x, ·))_k (:func:`squarechipo.losses.plackett_luce_top1_loss`),
unbiased for the clean best-of-K likelihood; it is unbounded below where a_k < 0, so the rewards are clipped to
±max_margin/2 (the bound of :class:`PrivateRewardConfig`).

It is the same TRL ``RewardTrainer`` (one-output classifier, logging, checkpoints, card and
``squarechipo_privacy.json``); tokenization and collation are replaced for K sequences per row.
Sequences longer than ``max_length`` are truncated (keep the start), never dropped.
"""

from __future__ import annotations

import torch

from squarechipo.losses import plackett_luce_top1_loss
from squarechipo.reward.features import reward_texts
from squarechipo.reward.trainer import PrivateRewardTrainer

__all__ = ["BestOfKRewardTrainer"]


class _BestOfKCollator:
    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, examples):
        sequences = [ids for example in examples for ids in example["responses_ids"]]
        width = max(len(s) for s in sequences)
        input_ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for i, ids in enumerate(sequences):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            attention_mask[i, : len(ids)] = 1
        weights = torch.tensor([example["label_weights"] for example in examples], dtype=torch.float32)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "label_weights": weights}


class BestOfKRewardTrainer(PrivateRewardTrainer):
    """Reward model r(x, a) on released best-of-K labels with the debiased top-1 Plackett–Luce loss."""

    _best_of_k = True
    _debiasing_methods = ("analyzer_weights", "none")

    def __init__(self, model, args=None, train_dataset=None, processing_class=None, **kwargs):
        columns = getattr(train_dataset, "column_names", None) or []
        missing = [c for c in ("prompt", "responses", "label_weights") if c not in columns]
        if missing:
            raise ValueError(
                f"best-of-K training needs {missing}: release the rows with "
                "squarechipo.privacy.release_dataset with KaryRR or SubsetMechanism (it adds label_weights)."
            )
        pad = (
            processing_class.pad_token_id
            if processing_class.pad_token_id is not None
            else processing_class.eos_token_id
        )
        kwargs.setdefault("data_collator", _BestOfKCollator(pad))
        super().__init__(model, args=args, train_dataset=train_dataset, processing_class=processing_class, **kwargs)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        self._check_read(dataset, dataset_name)  # the label rule of the private-trainer base
        if "responses_ids" in dataset.column_names:
            return dataset

        def tokenize(row):
            texts = reward_texts(
                processing_class, [row["prompt"]] * len(row["responses"]), row["responses"], append_eos=True
            )
            tokens = processing_class(texts, add_special_tokens=False)["input_ids"]
            return {"responses_ids": [ids[: args.max_length] if args.max_length else ids for ids in tokens]}

        prepared = dataset.map(tokenize, desc=f"tokenizing {dataset_name} best-of-K rows")
        self._remember(prepared)
        return prepared

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = ["responses_ids", "label_weights"]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        weights = inputs.pop("label_weights")
        outputs = model(**inputs, use_cache=False)
        scores = outputs.logits.squeeze(-1).reshape(weights.shape)
        bound = self.args.max_margin / 2.0
        scores = torch.clamp(scores, -bound, bound)
        loss = plackett_luce_top1_loss(scores, weights.to(scores.device)).mean()
        with torch.no_grad():
            self._metrics[mode]["released_top1_agreement"].append(
                self.accelerator.gather_for_metrics((scores.argmax(-1) == weights.argmax(-1)).float()).mean().item()
            )
        return (loss, outputs) if return_outputs else loss
