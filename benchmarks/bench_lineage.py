"""Benchmark (not a test): what the lineage guard costs at trainer construction, on a 0.45B model built from a config.

Prints the seconds of the weights' identity, the sketch of a private run's starting model, and the whole lookup of an
unrecorded model (:meth:`squarechipo.privacy.provenance.lineage.ModelLineage.of_model`), beside the exact float32
digest that the guard used to compute (still used for the studies' set-up digests), each the best of 3 after a warm-up.

    .venv/bin/python benchmarks/bench_lineage.py            # a 0.45B Llama (24 layers, 1024 wide, 49,152 tokens)
    .venv/bin/python benchmarks/bench_lineage.py --layers 2 # a quick look
"""

from __future__ import annotations

import argparse
import os
import tempfile
import timeit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=1024)
    args = parser.parse_args()
    os.environ["SQUARECHIPO_RECORD_STORE"] = os.path.join(tempfile.mkdtemp(), "records.sqlite")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from squarechipo.privacy.provenance.lineage import ModelLineage
    from squarechipo.privacy.provenance.record import start_sketch, weights_fingerprint
    from squarechipo.privacy.provenance.sketch import weights_identity

    config = LlamaConfig(
        vocab_size=49152, hidden_size=args.hidden, intermediate_size=4 * args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=16, num_key_value_heads=16, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    size = sum(p.numel() for p in model.parameters()) / 1e9
    threads = torch.get_num_threads()
    print(f"Llama with {size:.2f}B parameters (float32, {threads} threads), best of 3 after a warm-up:")
    for name, run in (
        ("weights identity (sampled, the model's dtype)", lambda: weights_identity(model)),
        ("sketch of a private run's starting model", lambda: start_sketch(model, True)),
        ("lineage of an unrecorded model (identity + store)", lambda: ModelLineage.of_model(model)),
        ("exact float32 digest of every weight (before)", lambda: weights_fingerprint(model)),
    ):
        run()
        print(f"  {name:<52}{min(timeit.repeat(run, number=1, repeat=3)):>8.3f} s")


if __name__ == "__main__":
    main()
