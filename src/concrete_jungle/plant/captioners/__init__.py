"""Caption rewriters: one small interface, batched.

A captioner takes `RewriteRequest`s (caption, keyword, its span and category) and returns one `Reply`
per request: the raw text it produced, or an error. Cleaning and validation are the pipeline's job
(`validation.py`), so every captioner is judged by the same rules.

- ``rules``: offline substitution, the NegCLIP-style baseline and the CPU default (`rules.py`)
- ``openai``: any OpenAI-compatible server, e.g. vLLM serving Qwen3-32B (`openai_api.py`)
- ``transformers``: in-process batched generation with a causal LM (`transformers_lm.py`)
- any other class with this interface, by entry point or ``package.module:Class`` (`plant/plugins.py`); the demo's
  toy world joins that way
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...errors import CaptionerError  # noqa: F401  (raised by every captioner)


@dataclass(frozen=True)
class RewriteRequest:
    id: str
    caption: str
    keyword: str
    span: tuple[int, int]
    category: str
    mode: str
    attempt: int = 0  # retries after a rejected reply ask again with another seed
    seed: int = 0


@dataclass(frozen=True)
class Reply:
    text: str
    error: str | None = None  # the request failed (server error after retries, ...); text is then ""


class Captioner(Protocol):
    name: str  # identifier written into every record

    def rewrite(self, requests: list[RewriteRequest]) -> list[Reply]: ...

    def close(self) -> None: ...


def make_captioner(name: str, **options) -> Captioner:
    """A captioner by name (built-in, registered plugin, or ``package.module:Class``; see `plugins`)."""
    from ..plugins import create

    return create("captioner", name, **options)
