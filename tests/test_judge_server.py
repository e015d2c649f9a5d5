"""The OpenAI-compatible judge client against a real server on localhost.

The server is llama.cpp's (``python -m llama_cpp.server``, from llama-cpp-python, which
scripts/install.sh builds once and caches as a wheel) serving the embedded SmolLM2 GGUF: a real
OpenAI-compatible ``/v1/chat/completions`` with a real model, nothing mocked. Set
SQUARECHIPO_SKIP_LLAMA_CPP=1 to skip these tests where llama.cpp was not built.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from squarechipo.judge.openai_compatible import JudgeCache, OpenAICompatibleJudge
from squarechipo.judge.templates import FINANCE_TEMPLATE
from squarechipo.models.embedded import embedded_gguf_path

if os.environ.get("SQUARECHIPO_SKIP_LLAMA_CPP") == "1":
    pytest.skip("SQUARECHIPO_SKIP_LLAMA_CPP=1: llama.cpp server tests skipped", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    import llama_cpp.server  # noqa: F401  (fails loudly if install.sh did not build it)

    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(embedded_gguf_path()),
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
            "--n_threads",
            "2",
            "--verbose",
            "False",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 180
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {process.stderr.read()[-3000:]}")
        try:
            if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.5)
    else:
        process.kill()
        raise RuntimeError("llama_cpp.server did not start within 180 s")
    yield base
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


PAIRS = [
    (
        f"You have ${1000 * (i + 1)} to save for a trip. What do you do?",
        "Put it in an insured savings account and budget for the trip.",
        "Bet all of it on a meme coin and hope it goes up.",
    )
    for i in range(12)
]


def test_judge_answers_through_a_real_server(server, tmp_path):
    judge = OpenAICompatibleJudge(
        server, "smollm2", FINANCE_TEMPLATE, max_concurrency=2, cache_path=tmp_path / "c.sqlite"
    )
    prompts, a, b = map(list, zip(*PAIRS[:4]))
    verdicts = judge.verdicts(prompts, a, b)
    assert len(verdicts) == 4 and all(v.raw is not None for v in verdicts)
    assert all(v.choice in (0, 1, None) for v in verdicts)
    assert judge.requests_sent == 4 and len(judge.cache) == 4
    # TRL's interface: indices into each completion pair, -1 where no answer.
    picks = judge.judge(prompts, [list(pair) for pair in zip(a, b)], shuffle_order=True, seed=0)
    assert set(picks) <= {0, 1, -1}
    judge.close()


def test_logprobs_give_log_odds_that_agree_with_the_letter_and_survive_the_cache(server, tmp_path):
    judge = OpenAICompatibleJudge(
        server, "smollm2", FINANCE_TEMPLATE, max_tokens=1, logprobs=True, cache_path=tmp_path / "lp.sqlite"
    )
    prompts, a, b = map(list, zip(*PAIRS[:4]))
    verdicts = judge.verdicts(prompts, a, b)
    assert all(v.log_odds is not None and math.isfinite(v.log_odds) for v in verdicts)
    # The log-odds are log Σ P(A-like tokens) − log Σ P(B-like tokens) over the server's own top logprobs.
    body = {
        "model": "smollm2",
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
    plain = OpenAICompatibleJudge(server, "smollm2", FINANCE_TEMPLATE, max_tokens=1, cache_path=tmp_path / "lp.sqlite")
    assert all(v.log_odds is None for v in plain.verdicts(prompts, a, b)) and plain.requests_sent == 4


def test_interrupted_run_resumes_from_the_cache(server, tmp_path):
    cache = tmp_path / "cache.sqlite"
    script = textwrap.dedent(f"""
        import sys
        from squarechipo.judge.openai_compatible import OpenAICompatibleJudge
        judge = OpenAICompatibleJudge({server!r}, "smollm2", max_concurrency=1, cache_path={str(cache)!r})
        pairs = {PAIRS!r}
        judge.verdicts([p for p, _, _ in pairs], [a for _, a, _ in pairs], [b for _, _, b in pairs])
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and (not cache.exists() or len(JudgeCache(cache)) < 3):
        time.sleep(0.2)
    child.kill()  # interrupt the evaluation mid-way
    child.wait()
    done = len(JudgeCache(cache))
    assert 3 <= done < len(PAIRS), done
    judge = OpenAICompatibleJudge(server, "smollm2", max_concurrency=2, cache_path=cache)
    verdicts = judge.verdicts(*map(list, zip(*PAIRS)))
    assert judge.requests_sent == len(PAIRS) - done  # only the missing ones were asked
    assert len(verdicts) == len(PAIRS) and len(judge.cache) == len(PAIRS)
    again = OpenAICompatibleJudge(server, "smollm2", cache_path=cache)
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
