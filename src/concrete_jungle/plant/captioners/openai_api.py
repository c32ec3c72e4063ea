"""Rewriting through any OpenAI-compatible chat server: vLLM, SGLang, TGI, llama.cpp, or a hosted API.

The recommended path for the paper's Qwen3-32B: ``vllm serve Qwen/Qwen3-32B``, then
``--captioner openai --base-url http://localhost:8000/v1 --model Qwen/Qwen3-32B``.

Requests go out concurrently (``concurrency`` in flight, enough to keep a vLLM server's batch full),
spread round-robin over several ``base_urls``; 429, 5xx, timeouts and connection errors are retried with
exponential backoff (honouring ``Retry-After``); a malformed body is retried too, then reported as that
request's error. Qwen3's thinking is switched off (``chat_template_kwargs``). The API key is read from
an environment variable and never logged.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random

import httpx

from ..keywords import sample_rng
from . import CaptionerError, Reply, RewriteRequest
from .prompt import build_prompt

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAICaptioner:
    def __init__(
        self,
        model: str,
        base_urls: list[str] | str = "http://localhost:8000/v1",
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 64,
        timeout: float = 120.0,
        max_retries: int = 6,
        backoff: float = 1.0,
        max_tokens: int = 96,
        retry_temperature: float = 0.7,
        check_server: bool = True,
    ):
        self.model = model
        self.name = f"openai:{model}"
        self.base_urls = [u.rstrip("/") for u in ([base_urls] if isinstance(base_urls, str) else base_urls)]
        if not self.base_urls:
            raise CaptionerError("the openai captioner needs at least one --base-url")
        self._key = os.environ.get(api_key_env, "")
        self._headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_tokens = max_tokens
        self.retry_temperature = retry_temperature
        self._next_url = itertools.cycle(self.base_urls)
        if check_server:
            self.check_servers()

    @classmethod
    def check_options(cls, **options) -> None:
        """The servers answer and serve the model, before a run writes anything: building one checks them, and
        costs nothing else."""
        cls(**options).close()

    def close(self) -> None:
        pass

    def _redact(self, text: str) -> str:
        """A server's text with the API key blanked out: error bodies end up in rejects.jsonl and on the
        terminal, and some servers echo the request's headers."""
        return text.replace(self._key, "[API key]") if self._key else text

    def check_servers(self) -> None:
        """Fail before any work if a server cannot be reached or does not serve the model."""
        for url in self.base_urls:
            try:
                r = httpx.get(f"{url}/models", headers=self._headers, timeout=min(self.timeout, 30))
            except httpx.HTTPError as e:
                raise CaptionerError(self._redact(
                    f"cannot reach the OpenAI-compatible server at {url} ({type(e).__name__}: {e}); start it "
                    f"(e.g. `vllm serve {self.model}`) or fix --base-url"
                )) from None
            if r.status_code in (401, 403):
                raise CaptionerError(f"the server at {url} refused the API key (HTTP {r.status_code}); "
                                     "set the variable named by --api-key-env")
            if r.status_code == 200:
                try:
                    served = {m.get("id") for m in r.json().get("data", [])}
                except (ValueError, AttributeError):
                    served = set()
                if served and self.model not in served:
                    raise CaptionerError(f"the server at {url} serves {sorted(served)}, not {self.model!r}; "
                                         "fix --model")

    def _payload(self, req: RewriteRequest) -> dict:
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": build_prompt(req.caption, req.keyword, req.category, req.mode)}],
            "max_tokens": self.max_tokens,
            "temperature": 0.0 if req.attempt == 0 else self.retry_temperature,
            "seed": sample_rng(req.seed, f"{req.id}\x00{req.attempt}").getrandbits(31),
            "chat_template_kwargs": {"enable_thinking": False},
        }
        return payload

    async def _one(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, req: RewriteRequest) -> Reply:
        error = "no attempt made"
        for attempt in range(self.max_retries + 1):
            url = next(self._next_url)
            delay = self.backoff * 2**attempt * (0.5 + random.random())
            async with gate:
                try:
                    r = await client.post(f"{url}/chat/completions", json=self._payload(req), headers=self._headers)
                except (httpx.TimeoutException, httpx.TransportError) as e:
                    error = f"{type(e).__name__} from {url}"
                    await asyncio.sleep(delay)
                    continue
            if r.status_code in RETRY_STATUS:
                error = f"HTTP {r.status_code} from {url}"
                retry_after = r.headers.get("retry-after")
                await asyncio.sleep(float(retry_after) if retry_after and retry_after.isdigit() else delay)
                continue
            if r.status_code != 200:
                return Reply("", error=self._redact(f"HTTP {r.status_code} from {url}: {r.text[:200]}"))
            try:
                return Reply(r.json()["choices"][0]["message"]["content"] or "")
            except (ValueError, KeyError, IndexError, TypeError):
                error = self._redact(f"malformed response body from {url}: {r.text[:120]!r}")
                await asyncio.sleep(delay)
        return Reply("", error=f"{error} (after {self.max_retries + 1} tries)")

    async def _all(self, requests: list[RewriteRequest]) -> list[Reply]:
        gate = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout, limits=limits) as client:
            return await asyncio.gather(*(self._one(client, gate, r) for r in requests))

    def rewrite(self, requests: list[RewriteRequest]) -> list[Reply]:
        replies = asyncio.run(self._all(requests))
        unreachable = [r for r in replies if r.error and ("ConnectError" in r.error)]
        if requests and len(unreachable) == len(requests):
            raise CaptionerError(f"every request failed: {unreachable[0].error}; is the server still running?")
        return replies
