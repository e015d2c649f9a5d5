"""TRL's SFTTrainer with the lean LM head: only the positions that carry a label go through the LM head.

On devices without Triton (CPU, Neuron) TRL's fused head projects every position through the LM head, prompt and
padding included, so that tile shapes stay fixed; the SFT rows here are about 45% prompt and 15% padding, and the
head (49,152 × 576 for SmolLM2-135M, its backward accumulated in float32) was about 37% of an SFT step on this
machine's CPU. :func:`squarechipo.models.lm_head.add_lean_lm_head` scores the completion positions alone and
computes the same fields TRL's SFTTrainer reads (log-probs, entropy, top-1), so the loss, the gradients and the
logged ``entropy`` and ``mean_token_accuracy`` are TRL's (``tests/test_sft_trainer.py``). Models the lean head does
not cover keep TRL's head.
"""

from __future__ import annotations

import logging

from accelerate.utils import is_peft_model
from trl import SFTTrainer

from squarechipo.models.lm_head import add_lean_lm_head

__all__ = ["LeanSFTTrainer", "SFT_HEAD_OUTPUTS"]

logger = logging.getLogger("squarechipo")

#: The per-token fields TRL's SFTTrainer.compute_loss reads from the fused head's output.
SFT_HEAD_OUTPUTS = ("log_probs", "entropy", "is_top1")


class LeanSFTTrainer(SFTTrainer):
    """``trl.SFTTrainer`` whose LM head scores only labelled positions (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # TRL patched the model's forward with its own head in __init__ (before PEFT wraps it, on the base model);
        # the lean head replaces that patch with the same calling convention.
        base = self.model.get_base_model() if is_peft_model(self.model) else self.model
        self.lean_lm_head = add_lean_lm_head(base, share_prompt=False, outputs=SFT_HEAD_OUTPUTS)
        logger.info("squarechipo: SFT lean LM head %s", "on" if self.lean_lm_head else "off (model not covered)")
