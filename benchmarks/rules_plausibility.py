"""How often the offline rules captioner without WordNet (`rules`, ``wordnet=False``) writes an implausible negative.

Every unique SugarCrepe positive is parsed once; a keyword is sampled in each mode (hc, lc, wo, the default
sampler) and rewritten by the captioner's built-in lexicon. A judge independent of that lexicon flags:

- an object rewrite whose replacement shares no WordNet 3.0 lexicographer class with the keyword over their
  senses (an animal for an animal, food for food; `sunny day` -> `sunny glass`: noun.time against
  noun.substance and noun.artifact), or is not a WordNet noun at all;
- a relation rewrite of a preposition whose object is no thing in space: none of its senses is in a physical
  class (noun.artifact, noun.location, noun.object, noun.substance, noun.body, noun.plant, noun.animal, noun.food,
  noun.person, noun.group, noun.phenomenon): `on a sunny day` -> `under a sunny day` (noun.time), `sliced in half`
  -> `sliced on half` (noun.quantity), `in amazement` -> `on amazement` (noun.feeling);
- a relation rewrite of `in` before a garment (a noun under WordNet's `clothing`) into another preposition: the
  garment is worn, not a place (`a man in a hat` -> `a man on a hat`);
- a relation rewrite of a verb into one that shares no lexicographer class with it over their senses (`riding a
  horse` -> `washing a horse`: verb.motion against verb.contact and verb.change), as objects are judged.

Printed: rewrites made, rejected (no substitute known, or a fixed phrase) and flagged, per category, then the
relation rewrites by what the judge checks, ``--sample`` relation rewrites drawn at random for a person to read,
and the share of samples each mode loses, as `plant` loses them (three attempts, each reply validated), with the
built-in lexicon and with WordNet (the figures `plant` quotes when WordNet is missing). Needs WordNet 3.0
(`apt-get install wordnet-base`). Run it on the code before a change (a checkout on PYTHONPATH) and after:

    python benchmarks/rules_plausibility.py --captions data/sugarcrepe
"""

from __future__ import annotations

import argparse
import difflib
import random
from pathlib import Path

from concrete_jungle.nlp import load_spacy
from concrete_jungle.plant.captioners import RewriteRequest
from concrete_jungle.plant.captioners.rules import RulesCaptioner
from concrete_jungle.plant.captioners.validation import check_rewrite, clean_reply, replaced_span
from concrete_jungle.plant.concreteness import load_ratings
from concrete_jungle.plant.keywords import MODES, KeywordSampler, SamplerConfig, extract_candidates
from concrete_jungle.sources import anchor_caption, read_samples

WORDNET = Path("/usr/share/wordnet")


def read_index(path: Path) -> dict[str, list[int]]:
    """A WordNet index file: lemma -> the offsets of its senses, first sense first."""
    offsets = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith(" "):
                fields = line.split()
                n_ptr, n_senses = int(fields[3]), int(fields[2])
                offsets[fields[0]] = [int(o) for o in fields[6 + n_ptr: 6 + n_ptr + n_senses]]
    return offsets


class LexClasses:
    """The lexicographer files (noun.animal, noun.food, noun.time, ...) of a noun's or a verb's WordNet senses, and
    a noun's hypernyms."""

    def __init__(self, root: Path = WORDNET):
        self.root = root
        self.offsets = {pos: read_index(root / f"index.{pos}") for pos in ("noun", "verb")}
        self.files = {pos: open(root / f"data.{pos}", "rb") for pos in ("noun", "verb")}

    def _synset(self, pos: str, offset: int) -> tuple[int, list[int]]:
        """(class, hypernym offsets) of one synset."""
        f = self.files[pos]
        f.seek(offset)
        fields = f.readline().split()
        at = 4 + 2 * int(fields[3], 16)
        pointers = [fields[at + 1 + 4 * i: at + 5 + 4 * i] for i in range(int(fields[at]))]
        return int(fields[1]), [int(p[1]) for p in pointers if p[0] in (b"@", b"@i")]

    def _noun_offsets(self, noun: str) -> list[int]:
        key = noun.lower().replace(" ", "_")
        singulars = [key] + [key[: -len(end)] + repl for end, repl in (("ies", "y"), ("es", ""), ("s", ""))
                             if key.endswith(end)]
        return next((self.offsets["noun"][k] for k in singulars if k in self.offsets["noun"]), [])

    def senses(self, noun: str) -> list[int]:
        """Each sense's class, first sense first (a plural is looked up by its singular)."""
        return [self._synset("noun", o)[0] for o in self._noun_offsets(noun)]

    def of(self, noun: str) -> set[int]:
        return set(self.senses(noun))

    def is_a(self, noun: str, ancestor: str) -> bool:
        """Whether a sense of ``noun`` is ``ancestor``'s first sense or under it."""
        target = self._noun_offsets(ancestor)[:1]
        todo, seen = list(self._noun_offsets(noun)), set()
        while todo:
            offset = todo.pop()
            if offset in target:
                return True
            seen.add(offset)
            todo += [h for h in self._synset("noun", offset)[1] if h not in seen]
        return False

    def verb_classes(self, verb: str) -> set[int]:
        """The classes of a verb's senses, from its base form (`riding` -> ride, `holds` -> hold)."""
        v = verb.lower()
        bases = [v]
        if v.endswith("ing"):
            stem = v[:-3]
            bases += [stem, stem + "e"] + ([stem[:-1]] if len(stem) > 2 and stem[-1] == stem[-2] else [])
        for end, repl in (("ies", "y"), ("es", ""), ("s", "")):
            if v.endswith(end):
                bases.append(v[: -len(end)] + repl)
        offsets = next((self.offsets["verb"][b] for b in bases if b in self.offsets["verb"]), [])
        return {self._synset("verb", o)[0] for o in offsets}


# the lexicographer classes of things in space (WordNet's lexnames file): a preposition's object outside them
# places nothing (noun.time, noun.quantity, noun.feeling, noun.act, ...)
IN_SPACE = {3, 5, 6, 8, 13, 14, 15, 17, 18, 19, 20, 27}  # Tops, animal, artifact, body, food, group, location,
# object, person, phenomenon, plant, substance
RELATION_CHECKS = {"no place": "a preposition whose object is no thing in space",
                   "worn": "`in` before a garment turned into a preposition",
                   "other verb": "a verb turned into one of no shared class"}


def relation_problem(lex: LexClasses, doc, start: int, end: int, new: str) -> tuple[str, bool]:
    """(what the judge checks for this relation rewrite, whether it flags it): the objects of the prepositions in
    the replaced span (pronouns left out), or the verb."""
    tokens = [t for t in doc if start <= t.idx < end]
    if tokens and tokens[0].pos_ == "VERB":
        old, replacement = lex.verb_classes(tokens[0].text), lex.verb_classes(new)
        return "other verb", bool(old and replacement and not old & replacement)
    # each object with the nouns compounded into it: a mis-parse makes `standing` the object of `in a helmet
    # standing`, with `helmet` its compound
    objects = [[c.text] + [g.text for g in c.children if g.dep_ == "compound"]
               for t in tokens for c in t.children if c.dep_ == "pobj" and c.pos_ != "PRON"]
    if doc.text[start:end].lower() == "in" and any(lex.is_a(w, "clothing") for words in objects for w in words):
        return "worn", not new.endswith("ing")
    classes = [set().union(*(lex.of(w) for w in words)) for words in objects]
    return "no place", any(known and not known & IN_SPACE for known in classes)


def inserted(before: str, after: str) -> str:
    """The words a rewrite put in, an article it changed to agree (`a` -> `an`) left out."""
    a, b = before.split(), after.split()
    words = [w for op, _, _, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
             if op != "equal" for w in b[j1:j2]]
    return " ".join(w for w in words if w.lower() not in ("a", "an")).strip(".,;:!?")


def lost_share(captioner: RulesCaptioner, parsed: list, mode: str, attempts: int = 3) -> float:
    """The share of keyworded samples of ``mode`` that no attempt rewrites into a valid negative."""
    sampler = KeywordSampler(SamplerConfig(mode=mode))
    picked = [(sid, doc, sampler.choose(sid, candidates)) for sid, doc, candidates in parsed if candidates]
    picked = [(sid, doc.text, pick) for sid, doc, pick in picked if pick is not None]

    def valid(sid, caption, pick, attempt) -> bool:
        reply = captioner.rewrite([RewriteRequest(sid, caption, pick.text, (pick.start, pick.end), pick.category,
                                                  mode, attempt, 0)])[0]
        return reply.error is None and check_rewrite(caption, (pick.start, pick.end), pick.category,
                                                     clean_reply(reply.text)) is None

    lost = sum(not any(valid(*p, attempt) for attempt in range(attempts)) for p in picked)
    return lost / max(1, len(picked))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captions", nargs="+", required=True)
    ap.add_argument("--examples", type=int, default=8, help="flagged rewrites to print")
    ap.add_argument("--sample", type=int, default=40, help="relation rewrites drawn at random to print for reading")
    ap.add_argument("--seed", type=int, default=0, help="seed of that draw")
    args = ap.parse_args()

    ratings, nlp, lex = load_ratings(), load_spacy(), LexClasses()
    captioner = RulesCaptioner(wordnet=False)
    samples = [s for s in read_samples(args.captions) if not s.error]
    texts = [anchor_caption(s.captions) for s in samples]
    docs = list(nlp.pipe(texts, batch_size=256))
    parsed = [(s.id, doc, extract_candidates(doc, ratings)) for s, doc in zip(samples, docs)]
    counts = {c: {"rewritten": 0, "rejected": 0, "flagged": 0} for c in ("attribute", "object", "relation")}
    relations = {check: {"rewritten": 0, "flagged": 0} for check in RELATION_CHECKS}
    examples, relation_rewrites = [], []
    flagged_relations: dict[str, list[str]] = {check: [] for check in RELATION_CHECKS}
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
            if pick.category == "relation":  # every relation keyword, so two versions' draws name the same ones
                relation_rewrites.append(f"{caption.strip()} -> {reply.error or reply.text.strip()}")
            if reply.error:
                row["rejected"] += 1
                continue
            row["rewritten"] += 1
            start, end = replaced_span(caption, pick.start, pick.end, pick.category)
            flagged = False
            if pick.category == "object":
                flagged = not lex.of(caption[start:end]) & lex.of(inserted(caption, reply.text))
            elif pick.category == "relation":
                check, flagged = relation_problem(lex, doc, start, end, inserted(caption, reply.text))
                relations[check]["rewritten"] += 1
                relations[check]["flagged"] += flagged
                if flagged and len(flagged_relations[check]) < args.examples:
                    flagged_relations[check].append(f"{caption.strip()} -> {reply.text.strip()}")
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
    print(f"\nall rewrites: {total:.1%} flagged\n")
    print("| relation rewrites judged by | rewritten | flagged | share flagged |")
    print("| --- | --- | --- | --- |")
    for check, row in relations.items():
        share = row["flagged"] / row["rewritten"] if row["rewritten"] else 0.0
        print(f"| {RELATION_CHECKS[check]} | {row['rewritten']} | {row['flagged']} | {share:.1%} |")
    print("\nflagged, e.g.:")
    for example in examples:
        print(f"- {example}")
    for check, flagged in flagged_relations.items():
        print(f"\nflagged relation rewrites, {RELATION_CHECKS[check]}, e.g.:")
        for example in flagged:
            print(f"- {example}")
    print(f"\n{args.sample} relation keywords drawn at random (seed {args.seed}) and their rewrites, to read:")
    for example in random.Random(args.seed).sample(relation_rewrites, min(args.sample, len(relation_rewrites))):
        print(f"- {example}")
    print("\n| samples lost (3 attempts) | " + " | ".join(MODES) + " |\n| --- |" + " --- |" * len(MODES))
    for label, wordnet in (("built-in lexicon", False), ("WordNet 3.0", True)):
        shares = [lost_share(RulesCaptioner(wordnet=wordnet), parsed, mode) for mode in MODES]
        print(f"| {label} | " + " | ".join(f"{share:.1%}" for share in shares) + " |")


if __name__ == "__main__":
    main()
