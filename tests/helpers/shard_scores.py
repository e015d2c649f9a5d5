"""Test helper (run under torchrun): sharded + all-reduced candidate losses vs one process's, for a test only."""

import json
import sys
from pathlib import Path

import datasets
import torch
import torch.distributed as dist
from accelerate import PartialState
from transformers import AutoTokenizer

from squarechipo.models.logprobs import tokenize_preferences
from squarechipo.privacy.door import mechanism_input
from squarechipo.select.candidates import Candidate, load_candidate
from squarechipo.select.scoring import _score_candidates as score_candidates

ref, good, bad, data_dir, out = sys.argv[1:6]
state = PartialState(cpu=True)
tokenizer = AutoTokenizer.from_pretrained(ref)
private = datasets.load_from_disk(data_dir)


def load(path):
    return lambda: load_candidate(Candidate.from_name(path), dtype=torch.float32, device=torch.device("cpu"))


kwargs = dict(pad_token_id=tokenizer.pad_token_id, beta=0.1, link="chipo", clip=10.0, max_length=128, batch_size=4)
shard = private.shard(num_shards=state.num_processes, index=state.process_index, contiguous=True)
sharded = score_candidates(
    tokenize_preferences(mechanism_input(shard, "the sum this test checks"), tokenizer),
    load(ref),
    [load(good), load(bad)],
    **kwargs,
)
counts = [None] * state.num_processes
dist.all_gather_object(counts, len(shard))
if state.is_main_process:
    single = score_candidates(
        tokenize_preferences(mechanism_input(private, "the sum this test checks"), tokenizer),
        load(ref),
        [load(good), load(bad)],
        all_reduce=False,
        **kwargs,
    )
    Path(out).write_text(
        json.dumps(
            {
                "world_size": state.num_processes,
                "local_rows": counts,
                "sharded": sharded.tolist(),
                "single": single.tolist(),
            }
        )
    )
state.wait_for_everyone()
# Tear gloo down before the interpreter does: a live group at exit can abort a rank ("terminate called without an
# active exception", SIGABRT), which failed this helper once in CI after both ranks had finished.
state.destroy_process_group()
