"""Rule-swap negatives made during an import (format ``coco-swaps``, the NegCLIP-style baseline): the plant's
keyword candidates and its rules captioner, without a concreteness preference.

For each caption the rated candidates (`keywords.extract_candidates`) are put in a random order seeded by
(seed, record id), as `--mode wo` draws uniformly; each in turn is rewritten by the rules captioner (up to
``max_attempts`` tries, each another seeded choice) and checked as the plant checks a rewrite
(`captioners.validation`), until ``swaps`` distinct negatives are made. A negative's rating is its keyword's,
as in a planted record.
"""

from __future__ import annotations

from .captioners import RewriteRequest
from .captioners.validation import check_rewrite, clean_reply
from .keywords import extract_candidates, sample_rng


def make_swaps(record_id: str, doc, ratings, captioner, swaps: int, max_attempts: int, seed: int,
               candidates=None) -> tuple[list[dict], str | None]:
    """(negatives, None), or ([], why none could be made); a negative is a dict of caption, concreteness, kind
    (its keyword's category), keyword, span, rated and attempts."""
    caption = doc.text
    candidates = extract_candidates(doc, ratings) if candidates is None else candidates
    if not candidates:
        return [], "no keyword candidate (no rated word the rules can replace)"
    order = sample_rng(seed, f"swap\x00{record_id}").sample(candidates, len(candidates))
    made, why = [], None
    for cand in order:
        if len(made) == swaps:
            break
        for attempt in range(max_attempts):
            request = RewriteRequest(f"{record_id}\x00{cand.start}", caption, cand.text, (cand.start, cand.end),
                                     cand.category, "wo", attempt, seed)
            reply = captioner.rewrite([request])[0]
            text = clean_reply(reply.text) if reply.error is None else ""
            why = reply.error or check_rewrite(caption, (cand.start, cand.end), cand.category, text)
            if why is None and any(m["caption"] == text for m in made):
                why = "the same negative as another swap"
            if why is None:
                made.append({"caption": text, "concreteness": cand.concreteness, "kind": cand.category,
                             "keyword": cand.text, "category": cand.category, "span": [cand.start, cand.end],
                             "rated": cand.rated, "attempts": attempt + 1})
                break
    return made, None if made else f"no rule swap could be made ({why})"
