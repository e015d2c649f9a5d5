"""Tiny random models over the real SmolLM2 tokenizer: the trainer tests' models (the point is the trainer)."""

from __future__ import annotations


def tiny_llama_config(tokenizer, **overrides):
    """The config of the tiny test models: 2 layers, 64 wide, the real 49,152-token vocabulary."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **overrides,
    )


def make_tiny_model(tokenizer, seed: int = 0, dtype=None):
    """A 2-layer, 64-wide Llama over the real 49,152-token vocabulary."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_llama_config(tokenizer))
    return model.to(dtype) if dtype is not None else model


def make_tiny_classifier(tokenizer, seed: int = 0):
    """The tiny Llama with a one-output sequence-classification head (reward / preference models)."""
    import torch
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(seed)
    return LlamaForSequenceClassification(tiny_llama_config(tokenizer, num_labels=1))
