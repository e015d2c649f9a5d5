"""The OpenAI-compatible judge client against real servers on localhost, serving the embedded SmolLM2.

Back-ends (``squarechipo.judge.local_server``): ``transformers serve`` (installed with the dev extras, pure
Python) always; llama.cpp's server (``python -m llama_cpp.server``) where ``bash scripts/install_llama_cpp.sh``
built it, since it compiles llama.cpp. Only llama.cpp returns ``top_logprobs``, so the log-odds test runs where it
is installed and is skipped, with that reason, elsewhere. Nothing is mocked.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from squarechipo.judge.local_server import available_backends, local_judge_server
from squarechipo.judge.openai_compatible import JudgeCache, OpenAICompatibleJudge
from squarechipo.judge.templates import FINANCE_TEMPLATE, parse_verdict

#: One worker runs the module, so the shared servers start once (under xdist each worker started its own).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("judge_server")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def servers():
    """Each back-end's server, started on first use and shared by the module's tests."""
    import contextlib

    with contextlib.ExitStack() as stack:
        running = {}

        def get(backend: str):
            if backend not in available_backends():
                pytest.skip(
                    f"the {backend} judge server is not installed here (scripts/install_llama_cpp.sh builds it)"
                )
            if backend not in running:
                running[backend] = stack.enter_context(local_judge_server(backend))
            return running[backend]

        yield get


@pytest.fixture(params=["transformers", "llama.cpp"])
def server(request, servers):
    return servers(request.param)


@pytest.fixture
def transformers_server(servers):
    return servers("transformers")


@pytest.fixture
def llama_cpp_server(servers):
    return servers("llama.cpp")


PAIRS = [
    (
        f"You have ${1000 * (i + 1)} to save for a trip. What do you do?",
        "Put it in an insured savings account and budget for the trip.",
        "Bet all of it on a meme coin and hope it goes up.",
    )
    for i in range(12)
]


def _greedy_replies(messages: list[list[dict]], max_new_tokens: int) -> list[str]:
    """What the served model itself answers, computed in this process: its chat template, greedy decoding."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from squarechipo.models import resolve_model_path

    path = resolve_model_path("embedded")
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    replies = []
    for conversation in messages:
        ids = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, return_tensors="pt")
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        replies.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return replies


def test_judge_answers_through_a_real_server(server, tmp_path):
    judge = OpenAICompatibleJudge(
        server.base_url,
        server.model,
        FINANCE_TEMPLATE,
        max_tokens=1,
        max_concurrency=2,
        cache_path=tmp_path / "c.sqlite",
    )
    prompts, a, b = map(list, zip(*PAIRS[:4]))
    verdicts = judge.verdicts(prompts, a, b)
    assert len(verdicts) == 4 and all(v.raw is not None for v in verdicts)
    # Each verdict is the letter the model's own reply names: the client parses what the server said.
    assert [v.choice for v in verdicts] == [parse_verdict(v.raw, FINANCE_TEMPLATE.options) for v in verdicts]
    if server.backend == "transformers":  # the server runs the same weights: its replies are the model's greedy ones
        messages = [FINANCE_TEMPLATE.messages(*pair) for pair in zip(prompts, a, b)]
        assert [v.raw.strip() for v in verdicts] == [r.strip() for r in _greedy_replies(messages, judge.max_tokens)]
    assert judge.requests_sent == 4 and len(judge.cache) == 4
    # TRL's interface: indices into each completion pair, -1 where no answer.
    picks = judge.judge(prompts, [list(pair) for pair in zip(a, b)], shuffle_order=True, seed=0)
    assert set(picks) <= {0, 1, -1}
    judge.close()


def test_logprobs_give_log_odds_that_agree_with_the_letter_and_survive_the_cache(llama_cpp_server, tmp_path):
    server = llama_cpp_server.base_url
    judge = OpenAICompatibleJudge(
        server,
        llama_cpp_server.model,
        FINANCE_TEMPLATE,
        max_tokens=1,
        logprobs=True,
        cache_path=tmp_path / "lp.sqlite",
    )
    prompts, a, b = map(list, zip(*PAIRS[:4]))
    verdicts = judge.verdicts(prompts, a, b)
    assert all(v.log_odds is not None and math.isfinite(v.log_odds) for v in verdicts)
    # The log-odds are log Σ P(A-like tokens) − log Σ P(B-like tokens) over the server's own top logprobs.
    body = {
        "model": llama_cpp_server.model,
        "messages": FINANCE_TEMPLATE.messages(prompts[0], a[0], b[0]),
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 20,
    }
    top = httpx.post(f"{server}/chat/completions", json=body, timeout=60).json()["choices"][0]["logprobs"]["content"][
        0
    ]
    mass = {"A": 0.0, "B": 0.0}
    for entry in top["top_logprobs"]:
        letter = entry["token"].strip().upper()
        if letter in mass:
            mass[letter] += math.exp(entry["logprob"])
    assert mass["A"] > 0 and mass["B"] > 0
    assert verdicts[0].log_odds == pytest.approx(math.log(mass["A"]) - math.log(mass["B"]), abs=1e-6)
    sent = judge.requests_sent
    cached = judge.verdicts(prompts, a, b)
    assert judge.requests_sent == sent and [v.log_odds for v in cached] == [v.log_odds for v in verdicts]
    # The plain judge (no logprobs) has its own cache entries and reports no log-odds.
    plain = OpenAICompatibleJudge(
        server, llama_cpp_server.model, FINANCE_TEMPLATE, max_tokens=1, cache_path=tmp_path / "lp.sqlite"
    )
    assert all(v.log_odds is None for v in plain.verdicts(prompts, a, b)) and plain.requests_sent == 4


def test_interrupted_run_resumes_from_the_cache(transformers_server, tmp_path):
    server, model = transformers_server.base_url, transformers_server.model
    cache = tmp_path / "cache.sqlite"
    script = textwrap.dedent(f"""
        import sys
        from squarechipo.judge.openai_compatible import OpenAICompatibleJudge
        judge = OpenAICompatibleJudge(
            {server!r}, {model!r}, max_tokens=1, max_concurrency=1, cache_path={str(cache)!r}
        )
        pairs = {PAIRS!r}
        judge.verdicts([p for p, _, _ in pairs], [a for _, a, _ in pairs], [b for _, _, b in pairs])
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and (not cache.exists() or len(JudgeCache(cache)) < 3):
        time.sleep(0.2)
    # Interrupt the evaluation mid-way. SIGTERM, not SIGKILL: under the warm test servers `sys.executable` is a shim
    # that passes SIGTERM to the judge's process and returns once it ended; SIGKILL would end the shim alone, and the
    # judge, still running, could cache another verdict after `done` is counted.
    child.terminate()
    child.wait()
    done = len(JudgeCache(cache))
    assert 3 <= done < len(PAIRS), done
    judge = OpenAICompatibleJudge(server, model, max_tokens=1, max_concurrency=2, cache_path=cache)
    verdicts = judge.verdicts(*map(list, zip(*PAIRS)))
    assert judge.requests_sent == len(PAIRS) - done  # only the missing ones were asked
    assert len(verdicts) == len(PAIRS) and len(judge.cache) == len(PAIRS)
    again = OpenAICompatibleJudge(server, model, max_tokens=1, cache_path=cache)
    assert [v.raw for v in again.verdicts(*map(list, zip(*PAIRS)))] == [v.raw for v in verdicts]
    assert again.requests_sent == 0


#: What the scripted server answers to a prompt naming each key, and the verdict the judge must make of it.
_SCRIPTED = {
    "KEY-bare-a": ("A", 0),
    "KEY-answer-b": ("Answer: B", 1),
    "KEY-prose": ("A gentle breeze crosses the field.", None),
    "KEY-both": ("Both A and B are fine.", None),
    "KEY-empty": ("", None),
    "KEY-garbled": (None, None),  # a 200 whose body is not JSON: retried, then reported as an error
}


@pytest.fixture
def scripted_server():
    """A real HTTP server on localhost speaking /v1/chat/completions with scripted replies (no model)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = " ".join(m["content"] for m in body["messages"])
            (reply, _), *_ = [v for k, v in _SCRIPTED.items() if k in text]
            payload = (
                b"<html>502 upstream</html>"
                if reply is None
                else json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
            )
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_malformed_replies_are_counted_not_fatal(scripted_server):
    """Each reply shape gets its verdict: letters are parsed, prose, both letters and empty replies are None
    (counted as invalid, not guessed), and a garbled body is retried then reported, never raised."""
    judge = OpenAICompatibleJudge(scripted_server, "scripted", max_retries=2, backoff=0.01, max_concurrency=3)
    keys = list(_SCRIPTED)
    verdicts = judge.verdicts([f"Question {k}?" for k in keys], ["one"] * len(keys), ["two"] * len(keys))
    assert [v.choice for v in verdicts] == [_SCRIPTED[k][1] for k in keys]
    assert [v.raw for v in verdicts[:-1]] == [_SCRIPTED[k][0] for k in keys[:-1]]
    assert verdicts[-1].raw.startswith("error: JSONDecodeError")
    assert judge.requests_sent == len(keys) - 1 + 3  # the garbled one: one try and two retries


def test_unreachable_server_retries_then_reports():
    judge = OpenAICompatibleJudge(f"http://127.0.0.1:{_free_port()}/v1", "x", max_retries=2, backoff=0.01, timeout=2)
    verdicts = judge.verdicts(["p"], ["a"], ["b"])
    assert verdicts[0].choice is None and verdicts[0].raw.startswith("error: ConnectError")
    assert judge.requests_sent == 3  # one try and two retries


def test_hanging_server_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts TCP connections, never answers HTTP
    try:
        port = listener.getsockname()[1]
        judge = OpenAICompatibleJudge(f"http://127.0.0.1:{port}/v1", "x", max_retries=1, backoff=0.01, timeout=0.5)
        start = time.time()
        verdicts = judge.verdicts(["p"], ["a"], ["b"])
        assert verdicts[0].choice is None and "Timeout" in verdicts[0].raw
        assert time.time() - start < 10
    finally:
        listener.close()
