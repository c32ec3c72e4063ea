"""Cleaning and validation of a rewritten caption (docs/method.md §2).

`clean_reply` turns what an LLM said into one caption; `check_rewrite` says why a caption is not a valid
hard negative of the original (or ``None``): empty, unchanged, keyword still where it stood, words outside
the keyword's phrase changed (beyond article and number agreement), or longer than CLIP reads.
"""

from __future__ import annotations

import functools
import re

from ..keywords import SPATIAL_PHRASES

CLIP_CONTEXT = 77  # tokens open_clip's text towers read, start and end tokens included

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_PREFIX = re.compile(r"^\s*\**\s*(output|new caption|caption|answer)\s*\**\s*[:：]\s*\**\s*", re.IGNORECASE)
_QUOTES = "\"'“”‘’`"
_WORDS = re.compile(r"[\w'-]+")

# word pairs that agreement may change outside the keyword
_AGREEMENT = [{"a", "an"}, {"is", "are"}, {"was", "were"}, {"has", "have"}, {"this", "these"}, {"that", "those"},
              {"it", "they"}, {"its", "their"}, {"does", "do"}]


def clean_reply(reply: str) -> str:
    """The caption inside an LLM reply: no `<think>` block, no `Output:` prefix, no quotes, first line and
    first sentence only (what follows is an explanation)."""
    text = _THINK.sub("", reply or "").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    text = _PREFIX.sub("", text).strip()
    text = text.strip(_QUOTES).strip()
    # "A dog on a couch. The object was changed." -> the first sentence
    m = re.search(r"[.!?](?=\s+[A-Z(])", text)
    if m:
        text = text[: m.end()]
    return text.strip(_QUOTES).strip()


def _same_word(a: str, b: str) -> bool:
    """Equal, or equal up to agreement: a/an, is/are, ..., and singular/plural of a noun."""
    if a == b:
        return True
    if any(a in pair and b in pair for pair in _AGREEMENT):
        return True
    short, long_ = sorted((a, b), key=len)
    return long_ in (short + "s", short + "es") or (short.endswith("y") and long_ == short[:-1] + "ies")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(text)]


def replaced_span(caption: str, start: int, end: int, category: str) -> tuple[int, int]:
    """The part of the caption a rewrite may change: the keyword, or for a relation in a multi-word spatial
    phrase the whole phrase (`in front of` -> `behind`, as in the paper's own example)."""
    if category != "relation":
        return start, end
    for phrase, _ in SPATIAL_PHRASES:
        pattern = r"\b" + r"\s+".join(map(re.escape, phrase)) + r"\b"
        for m in re.finditer(pattern, caption, flags=re.IGNORECASE):
            if m.start() <= start and end <= m.end():
                return m.start(), m.end()
    return start, end


@functools.lru_cache(maxsize=1)
def clip_tokenizer():
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer()


def clip_token_count(text: str) -> int:
    return len(clip_tokenizer().encode(text)) + 2


def check_rewrite(caption: str, keyword_span: tuple[int, int], category: str, new: str) -> str | None:
    """Why ``new`` is not a valid rewrite of ``caption`` at ``keyword_span``, or ``None`` if it is."""
    if not new or not new.strip():
        return "empty reply"
    if new.strip().rstrip(".").lower() == caption.strip().rstrip(".").lower():
        return "unchanged caption"
    start, end = replaced_span(caption, *keyword_span, category)
    before, keyword, after = _words(caption[:start]), _words(caption[start:end]), _words(caption[end:])
    words = _words(new)
    if len(words) < len(before) + len(after) + 1:
        return "keyword removed, not replaced"
    head, tail = words[: len(before)], words[len(words) - len(after):] if after else []
    middle = words[len(before): len(words) - len(after)]
    if not all(map(_same_word, before, head)) or not all(map(_same_word, after, tail)):
        return "words outside the keyword changed"
    if any(middle[i: i + len(keyword)] == keyword for i in range(len(middle) - len(keyword) + 1)):
        return "keyword not replaced"
    if clip_token_count(new) > CLIP_CONTEXT:
        return f"longer than {CLIP_CONTEXT} CLIP tokens"
    return None
