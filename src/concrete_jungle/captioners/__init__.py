"""Caption rewriters: one small interface, batched.

A captioner takes `RewriteRequest`s (caption, keyword, its span and category) and returns one `Reply`
per request: the raw text it produced, or an error. Cleaning and validation are the pipeline's job
(`validation.py`), so every captioner is judged by the same rules.

- ``rules``: offline substitution, the NegCLIP-style baseline and the CPU default (`rules.py`)
- ``openai``: any OpenAI-compatible server, e.g. vLLM serving Qwen3-32B (`openai_api.py`)
- ``transformers``: in-process batched generation with a causal LM (`transformers_lm.py`)
- ``toyworld``: the offline demo's world, whose grammar it rewrites exactly (`toyworld/rewrite.py`)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class CaptionerError(RuntimeError):
    """A captioner that cannot work at all (unreachable server, missing model): stop before losing work."""


CAPTIONERS = ("rules", "openai", "transformers", "toyworld")


def make_captioner(name: str, **options) -> Captioner:
    """A captioner by name; ``options`` are its constructor's keyword arguments."""
    if name == "rules":
        from .rules import RulesCaptioner

        return RulesCaptioner(**options)
    if name == "openai":
        from .openai_api import OpenAICaptioner

        return OpenAICaptioner(**options)
    if name == "transformers":
        from .transformers_lm import TransformersCaptioner

        return TransformersCaptioner(**options)
    if name == "toyworld":
        from ..toyworld.rewrite import ToyCaptioner

        return ToyCaptioner(**options)
    raise ValueError(f"captioner {name!r} is not one of {CAPTIONERS}")
