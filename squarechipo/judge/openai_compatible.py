"""A judge behind any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, OpenAI).

- bounded concurrency (a thread pool of ``max_concurrency`` requests);
- retries with exponential backoff and jitter on timeouts, connection errors, 429 and 5xx;
- per-request timeouts;
- an on-disk cache (SQLite) keyed by the judge (model and sampling settings), the template's
  fingerprint and the three texts. Every reply is stored as soon as it arrives, so an interrupted
  evaluation resumes without asking again. Failed requests are not cached (they are retried on the
  next run) and come back as a verdict with ``choice=None``, never as an exception.

With ``logprobs=True`` the request asks for the top log-probabilities of the first answer token
(``logprobs``/``top_logprobs``, served by OpenAI, vLLM and the llama.cpp server), and the verdict
carries log P(A) − log P(B) for the soft rule. A letter missing from the top list gets the lowest
listed log-probability, an upper bound on its own, so the log-odds are then a bound; with neither
letter listed there are none.

The API key is read from the environment variable named by ``api_key_env`` (never stored).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import tenacity
from scipy.special import logsumexp

from squarechipo.data.store import SqliteMap
from squarechipo.judge.base import PairwiseJudge, Verdict
from squarechipo.judge.templates import FINANCE_TEMPLATE, JudgeTemplate, parse_verdict

__all__ = ["OpenAICompatibleJudge", "JudgeCache"]

logger = logging.getLogger("squarechipo")
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class _Retryable(Exception):
    """A failure worth another attempt (tenacity retries it with exponential backoff and jitter)."""


_TOKEN_WRAPPERS = "*_`\"'()."


def _decode_cached(value: str) -> tuple[str, float | None]:
    """A cached reply: JSON {"content", "log_odds"}; a plain string from an older cache is the content."""
    try:
        record = json.loads(value)
    except ValueError:
        return value, None
    if isinstance(record, dict) and "content" in record:
        return str(record["content"]), record.get("log_odds")
    return value, None


class JudgeCache(SqliteMap):
    """Raw judge replies by request key, on disk (:class:`squarechipo.data.store.SqliteMap`)."""

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__(path, "replies", "text", column="reply")  # the schema of earlier versions' caches


class OpenAICompatibleJudge(PairwiseJudge):
    def __init__(
        self,
        base_url: str,
        model: str,
        template: JudgeTemplate = FINANCE_TEMPLATE,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        max_concurrency: int = 4,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_tokens: int = 8,
        temperature: float = 0.0,
        cache_path: str | os.PathLike | None = None,
        logprobs: bool = False,
        top_logprobs: int = 20,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1 (got {max_concurrency}).")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{model}"
        self.template = template
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.cache = JudgeCache(cache_path) if cache_path is not None else None
        self.requests_sent = 0
        self._count_lock = threading.Lock()
        key = os.environ.get(api_key_env) if api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def _key(self, prompt: str, response_a: str, response_b: str) -> str:
        identity = [
            self.model,
            self.max_tokens,
            self.temperature,
            self.template.fingerprint,
            prompt,
            response_a,
            response_b,
        ]
        if self.logprobs:
            identity.append(["logprobs", self.top_logprobs])
        return hashlib.sha256(json.dumps(identity, ensure_ascii=False).encode("utf-8")).hexdigest()

    def _letter_log_odds(self, choice: dict) -> float | None:
        """log P(A) − log P(B) from the first generated token's top logprobs (see the module docstring)."""
        content = ((choice.get("logprobs") or {}).get("content")) or []
        if not content:
            return None
        top = content[0].get("top_logprobs") or []
        values = {option: [] for option in self.template.options}
        for entry in top:
            token = str(entry.get("token", "")).strip().strip(_TOKEN_WRAPPERS).upper()
            if token in values and entry.get("logprob") is not None:
                values[token].append(float(entry["logprob"]))
        if not top or not any(values.values()):
            return None
        floor = min(float(e["logprob"]) for e in top if e.get("logprob") is not None)
        a, b = (float(logsumexp(values[o])) if values[o] else floor for o in self.template.options)
        return a - b

    def _ask(self, messages: list[dict[str, str]]) -> tuple[str, float | None]:
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.logprobs:
            body.update(logprobs=True, top_logprobs=self.top_logprobs)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=tenacity.wait_exponential(multiplier=self.backoff) + tenacity.wait_random(0, 0.25 * self.backoff),
            retry=tenacity.retry_if_exception_type(_Retryable),
            reraise=True,
            sleep=time.sleep,
        )
        try:
            return retrying(self._post, body)
        except _Retryable as error:
            raise RuntimeError(str(error)) from error

    def _post(self, body: dict) -> tuple[str, float | None]:
        """One request; raises :class:`_Retryable` on timeouts, transport errors, 429 and 5xx."""
        with self._count_lock:
            self.requests_sent += 1
        try:
            response = self._client.post("/chat/completions", json=body)
            if response.status_code != 200:
                message = f"HTTP {response.status_code}: {response.text[:200]}"
                raise _Retryable(message) if response.status_code in _RETRY_STATUS else RuntimeError(message)
            choice = (response.json().get("choices") or [{}])[0]  # a ValueError here is a garbled reply: retried
        except (httpx.TimeoutException, httpx.TransportError, ValueError) as error:
            raise _Retryable(f"{type(error).__name__}: {error}") from error
        content = (choice.get("message") or {}).get("content") or ""
        return content, self._letter_log_odds(choice) if self.logprobs else None

    def _one(self, prompt: str, response_a: str, response_b: str) -> Verdict:
        key = self._key(prompt, response_a, response_b)
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None:
            reply, log_odds = _decode_cached(cached)
            return Verdict(parse_verdict(reply, self.template.options), reply, log_odds)
        try:
            reply, log_odds = self._ask(self.template.messages(prompt, response_a, response_b))
        except RuntimeError as error:
            logger.warning("judge request failed after %d retries: %s", self.max_retries, error)
            return Verdict(None, f"error: {error}")
        if self.cache is not None:
            self.cache.put(key, json.dumps({"content": reply, "log_odds": log_odds}))
        return Verdict(parse_verdict(reply, self.template.options), reply, log_odds)

    def verdicts(self, prompts, responses_a, responses_b) -> list[Verdict]:
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(self._one, prompts, responses_a, responses_b))

    def close(self) -> None:
        self._client.close()
