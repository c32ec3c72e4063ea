"""How often the offline rules captioner without WordNet (`rules`, ``wordnet=False``) writes an implausible negative.

Every unique SugarCrepe positive is parsed once; a keyword is sampled in each mode (hc, lc, wo, the default
sampler) and rewritten by the captioner's built-in lexicon. A judge independent of that lexicon flags:

- an object rewrite whose replacement shares no WordNet 3.0 lexicographer class with the keyword over their
  senses (an animal for an animal, food for food; `sunny day` -> `sunny glass`: noun.time against
  noun.substance and noun.artifact), or is not a WordNet noun at all;
- a relation rewrite of a preposition whose object is, in its first sense, a WordNet noun.time (`on a sunny
  day` -> `under a sunny day`).

Printed: rewrites made, rejected (no substitute known) and flagged, per category. Needs WordNet 3.0
(`apt-get install wordnet-base`). Run it on the code before a change (a checkout on PYTHONPATH) and after:

    python benchmarks/rules_plausibility.py --captions data/sugarcrepe
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

from concrete_jungle.plant.captioners import RewriteRequest
from concrete_jungle.plant.captioners.rules import RulesCaptioner
from concrete_jungle.plant.captioners.validation import replaced_span
from concrete_jungle.plant.concreteness import load_ratings
from concrete_jungle.plant.keywords import MODES, KeywordSampler, SamplerConfig, extract_candidates
from concrete_jungle.sources import anchor_caption, read_samples

from concrete_jungle.nlp import load_spacy

WORDNET = Path("/usr/share/wordnet")


class LexClasses:
    """The lexicographer files (noun.animal, noun.food, noun.time, ...) of a noun's WordNet senses."""

    def __init__(self, root: Path = WORDNET):
        self.root, self.offsets = root, {}
        with open(root / "index.noun", encoding="utf-8") as f:
            for line in f:
                if not line.startswith(" "):
                    fields = line.split()
                    n_ptr, n_senses = int(fields[3]), int(fields[2])
                    self.offsets[fields[0]] = [int(o) for o in fields[6 + n_ptr: 6 + n_ptr + n_senses]]

    def senses(self, noun: str) -> list[int]:
        """Each sense's class, first sense first (a plural is looked up by its singular)."""
        key = noun.lower().replace(" ", "_")
        singulars = [key] + [key[: -len(end)] + repl for end, repl in (("ies", "y"), ("es", ""), ("s", ""))
                             if key.endswith(end)]
        offsets = next((self.offsets[k] for k in singulars if k in self.offsets), [])
        classes = []
        with open(self.root / "data.noun", "rb") as f:
            for offset in offsets:
                f.seek(offset)
                classes.append(int(f.readline().split()[1]))
        return classes

    def of(self, noun: str) -> set[int]:
        return set(self.senses(noun))


TIME = 28  # noun.time


def inserted(before: str, after: str) -> str:
    """The words a rewrite put in, an article it changed to agree (`a` -> `an`) left out."""
    a, b = before.split(), after.split()
    words = [w for op, _, _, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
             if op != "equal" for w in b[j1:j2]]
    return " ".join(w for w in words if w.lower() not in ("a", "an")).strip(".,;:!?")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captions", nargs="+", required=True)
    ap.add_argument("--examples", type=int, default=8, help="flagged rewrites to print")
    args = ap.parse_args()

    ratings, nlp, lex = load_ratings(), load_spacy(), LexClasses()
    captioner = RulesCaptioner(wordnet=False)
    samples = [s for s in read_samples(args.captions) if not s.error]
    texts = [anchor_caption(s.captions) for s in samples]
    docs = list(nlp.pipe(texts, batch_size=256))
    parsed = [(s.id, doc, extract_candidates(doc, ratings)) for s, doc in zip(samples, docs)]
    counts = {c: {"rewritten": 0, "rejected": 0, "flagged": 0} for c in ("attribute", "object", "relation")}
    examples = []
    for mode in MODES:
        sampler = KeywordSampler(SamplerConfig(mode=mode))
        for sid, doc, candidates in parsed:
            pick = sampler.choose(sid, candidates) if candidates else None
            if pick is None:
                continue
            caption = doc.text
            reply = captioner.rewrite([RewriteRequest(sid, caption, pick.text, (pick.start, pick.end),
                                                      pick.category, mode, 0, 0)])[0]
            row = counts[pick.category]
            if reply.error:
                row["rejected"] += 1
                continue
            row["rewritten"] += 1
            start, end = replaced_span(caption, pick.start, pick.end, pick.category)
            flagged = False
            if pick.category == "object":
                flagged = not lex.of(caption[start:end]) & lex.of(inserted(caption, reply.text))
            elif pick.category == "relation":
                token = next((t for t in doc if t.idx == pick.start), None)
                objects = [c for c in token.children if c.dep_ == "pobj"] if token is not None else []
                flagged = any(lex.senses(c.lemma_)[:1] == [TIME] for c in objects)
            if flagged:
                row["flagged"] += 1
                if len(examples) < args.examples:
                    examples.append(f"{caption} -> {reply.text}")
    print(f"{len(parsed)} captions, keywords in modes {', '.join(MODES)}\n")
    print("| category | rewritten | rejected (no substitute) | flagged implausible | share flagged |")
    print("| --- | --- | --- | --- | --- |")
    for category, row in counts.items():
        share = row["flagged"] / row["rewritten"] if row["rewritten"] else 0.0
        print(f"| {category} | {row['rewritten']} | {row['rejected']} | {row['flagged']} | {share:.1%} |")
    total = sum(r["flagged"] for r in counts.values()) / max(1, sum(r["rewritten"] for r in counts.values()))
    print(f"\nall rewrites: {total:.1%} flagged\n\nflagged, e.g.:")
    for example in examples:
        print(f"- {example}")


if __name__ == "__main__":
    main()
