"""The rating of a negative whose format gives none: the concreteness of the words it changed (docs/method.md §4,
"Imported sets").

The caption and the negative caption are split into words (``[\\w'-]+``, lower-cased) and aligned by
`difflib.SequenceMatcher`; the caption's words in a replaced or deleted run are the *removed* words, the negative's
words in a replaced or inserted run the *added* ones. The rated keyword candidates of the caption
(`keywords.extract_candidates`, the plant's own parse and ratings) that overlap a removed word are the changed
keywords; a negative that only adds words (nothing of the caption changed) is parsed in turn and its candidates
that overlap an added word are taken. The rating is the highest of the changed keywords' ratings: a negative
shows in the picture as soon as one of its changes does, so its most concrete change says how visible it is (a
swap changes two keywords, a replacement one). Where no candidate overlaps a change (a changed article, a word
the parse does not make a candidate) the changed words themselves are looked up in the ratings, removed then added,
with category ``other``. A negative with no rated changed word, or none at all (it differs in case or punctuation
only), has no rating and is dropped from its record with that reason.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from .keywords import extract_candidates

WORD = re.compile(r"[\w'-]+")


@dataclass
class Change:
    """What a negative changed and its rating: ``keyword`` (the rated text), its ``category``, the ``rated`` form,
    the ``removed`` and ``added`` words; ``reason`` when it has no rating."""

    concreteness: float | None = None
    keyword: str | None = None
    category: str | None = None
    rated: str | None = None
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    reason: str | None = None

    def to_dict(self) -> dict:
        return {"concreteness": self.concreteness, "keyword": self.keyword, "category": self.category,
                "rated": self.rated, "changed_words": {"removed": self.removed, "added": self.added}}


def words(text: str) -> list[tuple[str, int, int]]:
    return [(m.group().lower(), m.start(), m.end()) for m in WORD.finditer(text)]


def changed_spans(caption: str, negative: str) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
    """(the caption's removed words, the negative's added words), each with its character span."""
    a, b = words(caption), words(negative)
    matcher = difflib.SequenceMatcher(None, [w for w, _, _ in a], [w for w, _, _ in b], autojunk=False)
    removed, added = [], []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op in ("replace", "delete"):
            removed += a[i1:i2]
        if op in ("replace", "insert"):
            added += b[j1:j2]
    return removed, added


def _overlapping(candidates, spans):
    return [c for c in candidates if any(c.start < end and start < c.end for _, start, end in spans)]


def rate_change(caption_doc, negative: str, ratings, parse, candidates=None) -> Change:
    """The rating of ``negative`` against the parsed caption ``caption_doc`` (a spaCy ``Doc``); ``parse`` parses the
    negative when its added words must be rated; ``candidates``: the caption's, when already extracted."""
    removed, added = changed_spans(caption_doc.text, negative)
    change = Change(removed=[w for w, _, _ in removed], added=[w for w, _, _ in added])
    if not removed and not added:
        change.reason = "the negative has the same words as the caption (it differs in case or punctuation only)"
        return change
    hits = _overlapping(candidates if candidates is not None else extract_candidates(caption_doc, ratings), removed)
    if not hits and added:
        hits = _overlapping(extract_candidates(parse(negative), ratings), added)
    if hits:
        best = max(hits, key=lambda c: c.concreteness)  # ties: the first in the caption
        change.concreteness, change.keyword, change.category, change.rated = (best.concreteness, best.text,
                                                                              best.category, best.rated)
        return change
    for word, _, _ in removed + added:
        hit = ratings.lookup(word)
        if hit is not None and (change.concreteness is None or hit[1] > change.concreteness):
            change.concreteness, change.keyword, change.category, change.rated = hit[1], word, "other", hit[0]
    if change.concreteness is None:
        change.reason = (f"no rated word among the changed words ({', '.join(change.removed + change.added)}); "
                         f"{ratings.name} rates none of them")
    return change
