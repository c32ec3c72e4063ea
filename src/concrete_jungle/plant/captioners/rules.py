"""The offline captioner: category-aware word substitution, no model (a NegCLIP-style baseline).

- attribute: colour, material, size/state antonyms and number shifts from a small lexicon, then
  WordNet adjective antonyms;
- relation: spatial opposites (`under` -> `on`, `in front of` -> `behind`, `left` -> `right`) and
  interaction verbs swapped among verbs of the same form; a preposition that places nothing is not replaced: one
  of a fixed phrase (`sliced in half`, `in the distance`, `on display`) is a reject, `in` before a garment
  (`a man in a green hoodie`: worn, not a place) becomes `holding` or `carrying`, as `wearing` does, and `in`
  before a room or container becomes `outside` (`on a kitchen` would describe nothing);
- object: a co-hyponym from WordNet 3.0 (Debian's ``wordnet-base`` in ``/usr/share/wordnet``, or the folder
  WordNet's own ``WNSEARCHDIR`` names; `dog` -> `wolf`), kept only when it is a concrete word (Brysbaert >= 4),
  else a word of the same group from a built-in lexicon; a noun in no group (`day`) has no substitute: the
  sample is a reject, not `sunny glass`.

Articles (`a`/`an`) and plural nouns agree with the replacement. Each (seed, id, attempt) gives one
deterministic choice, so a retry after a rejected rewrite tries another word.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from ..concreteness import load_ratings
from ..keywords import sample_rng
from . import Reply, RewriteRequest
from .validation import replaced_span

WORDNET_ROOT = Path(os.environ.get("WNSEARCHDIR") or "/usr/share/wordnet")

COLOURS = ["red", "blue", "green", "yellow", "black", "white", "brown", "orange", "pink", "purple", "gray", "silver"]
MATERIALS = ["wooden", "metal", "plastic", "glass", "stone", "leather", "paper", "brick", "wicker", "concrete"]
OPPOSITES = {
    "large": "small", "big": "little", "tall": "short", "long": "short", "wide": "narrow", "old": "new",
    "young": "old", "empty": "full", "open": "closed", "wet": "dry", "clean": "dirty", "hot": "cold",
    "dark": "bright", "sliced": "whole", "parked": "moving", "cloudy": "clear", "sunny": "rainy",
    "busy": "empty", "thick": "thin", "heavy": "light", "round": "square", "striped": "plain",
    "crowded": "empty", "modern": "old", "little": "big", "short": "tall", "small": "large", "new": "old",
    "full": "empty", "closed": "open", "dry": "wet", "dirty": "clean", "cold": "hot", "bright": "dark",
    "whole": "sliced", "wild": "tame", "male": "female", "female": "male", "fresh": "rotten", "cooked": "raw",
}
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
RELATION_WORDS = {
    "on": "under", "under": "on", "above": "below", "below": "above", "over": "under", "beneath": "above",
    "underneath": "above", "inside": "outside", "outside": "inside", "in": "on", "into": "out of",
    "onto": "off", "off": "on", "up": "down", "down": "up", "behind": "in front of", "beside": "far from",
    "near": "far from", "by": "far from", "at": "away from", "toward": "away from", "towards": "away from",
    "along": "across", "across": "along", "through": "around", "around": "through", "against": "away from",
    "atop": "under", "between": "beside", "among": "beside", "past": "toward", "within": "outside",
    "alongside": "far from", "upon": "under", "amid": "beside",
}
# whole spatial phrases (the keyword's phrase is replaced, as in the paper's `in front of` -> `behind`)
PHRASE_OPPOSITES = {
    "in front of": "behind", "in back of": "in front of", "on top of": "under", "next to": "far from",
    "close to": "far from", "far from": "next to", "across from": "next to", "inside of": "outside of",
    "out of": "into", "in between": "beside", "to the left of": "to the right of",
    "to the right of": "to the left of", "on the left of": "on the right of", "on the right of": "on the left of",
    "in the middle of": "at the edge of", "in the center of": "at the edge of", "at the top of": "at the bottom of",
    "at the bottom of": "at the top of", "on the side of": "on top of", "on the edge of": "in the middle of",
    "at the end of": "at the start of", "on the back of": "on the front of",
}
# words after a preposition that make it part of a fixed phrase, not a place (`sliced in half`, `in the distance`,
# `on display`): replaced, the phrase reads as nonsense (`sliced on half`, `under display`)
FIXED_PHRASES = {
    "in": set("half halves thirds quarters unison amazement awe line lines row rows distance background foreground "
              "process midst shade dark wild air midair mid-air sky sun sunlight sunshine view action motion flight "
              "place order formation pairs groups public focus reflection game match tournament race".split()),
    "on": set("display sale fire duty vacation guard camera tv television air hand foot call time".split()),
    "at": set("night play work rest sea once first last least".split()),
    "by": set("hand itself himself herself themselves".split()),
}
# words before `in` that make it a fixed phrase: what something is covered or dressed in is no place
FIXED_BEFORE = {"in": set("covered dressed decorated painted wrapped clad dipped soaked coated cut sliced written "
                          "interested involved engaged lined filled".split())}
# enclosed places: what is in one is outside it in the negative (`standing in a kitchen` -> `outside a kitchen`,
# where `on a kitchen` would describe nothing)
ENCLOSURES = set(
    "room kitchen bathroom bedroom house building car bus train truck van office store shop restaurant garage barn "
    "tent cage box bag basket bowl cup sink tub bathtub pot oven refrigerator fridge drawer closet hall church "
    "station airport stadium classroom cabin shed pen container jar crate suitcase backpack".split())
# what is worn: `in` before one of these is wearing it (`a man in a green hoodie`), not a place
GARMENTS = set(
    "shirt t-shirt tshirt jacket hat helmet dress coat scarf tie skirt sweater vest cap glove boot shoe hoodie "
    "sweatshirt jeans pants trousers shorts suit uniform costume wetsuit outfit apron sunglasses "
    "goggles robe gown tuxedo bikini swimsuit jersey blouse overalls pajamas raincoat parka beanie bandana sneaker "
    "sandal mask clothes clothing attire jumpsuit kimono peacoat blazer cardigan leggings sock".split())
# words that end the noun phrase after a preposition (`in a black jacket is flipping ...`)
_PHRASE_ENDS = frozenset("is are was were with while who that which of for to on in at by under near behind next "
                         "beside holding standing sitting".split())
VERBS_ING = ["holding", "carrying", "pushing", "pulling", "watching", "touching", "throwing", "catching",
             "kicking", "dropping", "eating", "riding", "wearing", "feeding", "washing", "chasing"]
VERBS_S = ["holds", "carries", "pushes", "pulls", "watches", "touches", "throws", "catches", "kicks", "drops",
           "eats", "rides", "wears", "feeds", "washes", "chases"]
# co-hyponym groups: without WordNet an object is replaced only by a word of its own group (a dog by another
# animal, never by a surfboard); a noun in no group gets no substitute, and the sample is rejected with that reason
OBJECT_GROUPS = [
    ["dog", "cat", "horse", "cow", "sheep", "bear", "elephant", "giraffe", "zebra", "bird", "goat", "pig", "duck",
     "deer", "lion", "monkey", "chicken"],
    ["car", "bus", "truck", "train", "bicycle", "motorcycle", "boat", "airplane", "van", "tractor", "taxi", "scooter"],
    ["table", "chair", "sofa", "bed", "desk", "bench", "couch", "shelf", "cabinet", "stool"],
    ["pizza", "sandwich", "cake", "banana", "apple", "orange", "donut", "carrot", "broccoli", "hot dog", "egg",
     "bread", "salad", "steak", "soup", "cheese", "tomato", "potato", "burger", "cookie"],
    ["shirt", "jacket", "hat", "helmet", "dress", "coat", "scarf", "tie", "skirt", "sweater", "vest", "cap",
     "glove", "boot", "shoe"],
    ["cup", "bowl", "plate", "glass", "bottle", "mug", "fork", "knife", "spoon", "jar", "pot", "pan", "vase",
     "basket", "box", "coffee cup", "teapot", "wine glass"],
    ["man", "woman", "boy", "girl", "child", "person", "player", "skier", "surfer", "baby", "lady", "kid"],
    ["street", "road", "beach", "field", "park", "river", "lake", "mountain", "kitchen", "room", "bathroom",
     "sidewalk", "yard", "forest"],
    ["ball", "kite", "frisbee", "skateboard", "surfboard", "racket", "bat", "umbrella", "bag", "book", "snowboard",
     "suitcase", "backpack"],
    ["laptop", "computer", "phone", "television", "tv", "keyboard", "monitor", "camera", "remote", "screen"],
    ["oven", "refrigerator", "microwave", "sink", "toaster", "stove", "toilet", "bathtub", "dishwasher"],
    ["tree", "flower", "bush", "plant", "palm", "cactus"],
    ["house", "building", "church", "tower", "bridge", "barn", "station", "store", "restaurant"],
]
# a garment's wearer holds or carries it instead (`a man wearing a coat` -> `a man holding a coat`)
WORN = {"in": ["holding", "carrying"], "wearing": ["holding", "carrying"], "wears": ["holds", "carries"]}
VOWEL_SOUND = re.compile(r"^(?:[aeio]|u(?![sn]i|ni)|hour|honest|heir)", re.IGNORECASE)


class WordNet:
    """The two WordNet 3.0 relations the rules need, read from the database files directly."""

    def __init__(self, root: Path = WORDNET_ROOT):
        self.root = root
        self._index = {pos: self._read_index(pos) for pos in ("noun", "adj")}

    def _read_index(self, pos: str) -> dict[str, list[int]]:
        index = {}
        with open(self.root / f"index.{pos}", encoding="utf-8") as f:
            for line in f:
                if line.startswith(" "):
                    continue  # licence header
                fields = line.split()
                n_ptr = int(fields[3])
                n_synsets = int(fields[2])
                offsets = fields[6 + n_ptr: 6 + n_ptr + n_synsets]
                index[fields[0]] = [int(o) for o in offsets]
        return index

    @functools.lru_cache(maxsize=100_000)
    def _synset(self, pos: str, offset: int) -> tuple[list[str], list[tuple[str, int, str, str]]]:
        with open(self.root / f"data.{pos}", "rb") as f:
            f.seek(offset)
            fields = f.readline().decode("utf-8").split()
        n_words = int(fields[3], 16)
        words = [fields[4 + 2 * i] for i in range(n_words)]
        at = 4 + 2 * n_words
        n_ptr = int(fields[at])
        ptrs = [(fields[at + 1 + 4 * i], int(fields[at + 2 + 4 * i]), fields[at + 3 + 4 * i], fields[at + 4 + 4 * i])
                for i in range(n_ptr)]
        return words, ptrs

    def co_hyponyms(self, noun: str) -> list[str]:
        """Words under the hypernyms of the noun's first sense, the noun's own synset excluded."""
        offsets = self._index["noun"].get(noun.lower().replace(" ", "_"))
        if not offsets:
            return []
        own_words, ptrs = self._synset("noun", offsets[0])
        out = []
        for symbol, hyper, _, _ in ptrs:
            if symbol in ("@", "@i"):
                for sym2, hypo, _, _ in self._synset("noun", hyper)[1]:
                    if sym2 in ("~", "~i") and hypo != offsets[0]:
                        out.extend(self._synset("noun", hypo)[0])
        return [w.replace("_", " ") for w in out if w not in own_words]

    def antonyms(self, adjective: str) -> list[str]:
        offsets = self._index["adj"].get(adjective.lower(), [])
        out = []
        for off in offsets:
            for symbol, target, pos, _ in self._synset("adj", off)[1]:
                if symbol == "!" and pos in ("a", "s"):
                    out.extend(w.split("(")[0] for w in self._synset("adj", target)[0][:1])
        return [w.replace("_", " ") for w in out]


@functools.lru_cache(maxsize=1)
def load_wordnet() -> WordNet | None:
    return WordNet() if (WORDNET_ROOT / "index.noun").exists() else None


def pluralize(word: str) -> str:
    if re.search(r"(s|x|z|ch|sh)$", word):
        return word + "es"
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ies"
    return word + "s"


def match_case(replacement: str, original: str) -> str:
    return replacement[:1].upper() + replacement[1:] if original[:1].isupper() else replacement


class RulesCaptioner:
    """Deterministic substitution by category; ``wordnet=False`` uses the built-in lexicon alone."""

    def __init__(self, seed: int = 0, wordnet: bool = True, min_concreteness: float = 4.0):
        self.seed = seed
        self.wordnet = load_wordnet() if wordnet else None
        self.ratings = load_ratings()
        self.min_concreteness = min_concreteness
        self.name = "rules-wordnet3.0" if self.wordnet else "rules-lexicon"

    @classmethod
    def check_options(cls, wordnet: bool = True, **_) -> str | None:
        """A note when WordNet is asked for but not installed: most object keywords then have no substitute, and
        the user should know before the run what that costs and how to avoid it."""
        if not wordnet or (WORDNET_ROOT / "index.noun").exists():
            return None
        return (f"WordNet 3.0 is not installed (no {WORDNET_ROOT / 'index.noun'}): the rules captioner finds no "
                "substitute for most object keywords, and about 45 % of hc, 38 % of lc and 40 % of wo samples become "
                "rejects (9-12 % with WordNet; measured on SugarCrepe's captions, docs/benchmarks.md); install it: "
                "apt-get install wordnet-base")

    def close(self) -> None:
        pass

    def rewrite(self, requests: list[RewriteRequest]) -> list[Reply]:
        return [self._rewrite_one(r) for r in requests]

    def _rewrite_one(self, req: RewriteRequest) -> Reply:
        rng = sample_rng(req.seed or self.seed, f"{req.id}\x00{req.attempt}")
        start, end = replaced_span(req.caption, *req.span, req.category)
        original = req.caption[start:end]
        if req.category == "relation":
            phrase = fixed_phrase(original, req.caption[:start], req.caption[end:])
            if phrase:
                return Reply("", error=f"a fixed phrase, not a place: {phrase!r} (relation)")
        options = self._options(original, req, req.caption[end:])
        present = set(re.findall(r"[\w-]+", req.caption.lower()))
        options = [o for o in options if o.lower() != original.lower()
                   and (req.category == "relation" or o.lower() not in present)]
        if not options:
            return Reply("", error=f"no substitute known for {original!r} ({req.category})")
        new = match_case(rng.choice(options), original)
        before = fix_article(req.caption[:start], new)
        return Reply(before + new + req.caption[end:])

    def _options(self, original: str, req: RewriteRequest, after: str) -> list[str]:
        word = original.lower()
        if req.category == "relation":
            if word == "in" and names_garment(after):
                return WORN[word]
            if word == "in" and names_any(after, ENCLOSURES):
                return ["outside"]
            if word in PHRASE_OPPOSITES:
                return [PHRASE_OPPOSITES[word]]
            if word in RELATION_WORDS:
                return [RELATION_WORDS[word]]
            return same_form_verbs(word)
        if req.category == "attribute":
            for group in (COLOURS, MATERIALS):
                if word in group:
                    return group
            if word in OPPOSITES:
                return [OPPOSITES[word]]
            if word in NUMBERS:
                i = NUMBERS.index(word)
                return [n for n in NUMBERS[max(1, i - 1): i + 2] if n != word]  # never to `one`: plural nouns
            return self.wordnet.antonyms(word) if self.wordnet else []
        return self._objects(word)

    def _objects(self, word: str) -> list[str]:
        base, plural = self._singular(word)
        found: list[str] = []
        if self.wordnet:
            found = [w for w in self.wordnet.co_hyponyms(base)
                     if w.isascii() and w.replace(" ", "").isalpha() and w.islower()
                     and (self.ratings.get(w) or 0) >= self.min_concreteness]
        if not found:
            found = next((g for g in OBJECT_GROUPS if base in g), [])
        found = sorted(set(found) - {base})
        return [pluralize(w) for w in found] if plural else found

    def _singular(self, word: str) -> tuple[str, bool]:
        """(singular, was plural) for a noun: a plural ending whose stem the ratings know."""
        if not word.endswith("ss"):
            for end, repl in (("ies", "y"), ("es", ""), ("s", "")):
                if word.endswith(end) and word[: -len(end)] + repl in self.ratings:
                    return word[: -len(end)] + repl, True
        return word, False


def following_words(after: str, limit: int = 6) -> list[str]:
    """The words of the noun phrase that follows a preposition, lower-cased: up to ``limit``, until punctuation
    or a word that starts another phrase."""
    words = []
    for word in re.findall(r"[\w'-]+|[^\w\s]", after.lower())[:limit]:
        if not re.match(r"[\w'-]", word) or (word in _PHRASE_ENDS and words):
            break
        words.append(word)
    return words


def fixed_phrase(preposition: str, before: str, after: str) -> str | None:
    """The fixed phrase a preposition is part of (`sliced in half`, `in the cloudy blue sky`, `on display`,
    `covered in`), or None: the word before it, or a word of the noun phrase after it, is the phrase's word."""
    word = preposition.lower()
    words = following_words(after)
    hit = next((w for w in words if w in FIXED_PHRASES.get(word, ())), None)
    if hit is not None:
        return " ".join([word, *words[: words.index(hit) + 1]])
    previous = re.findall(r"[\w'-]+", before.lower())[-1:]
    return f"{previous[0]} {word}" if previous and previous[0] in FIXED_BEFORE.get(word, ()) else None


def names_any(after: str, nouns: set[str]) -> bool:
    """Whether the noun phrase after a preposition names one of ``nouns``, singular or plural."""
    return any(w in nouns or w.removesuffix("s") in nouns or w.removesuffix("es") in nouns
               for w in following_words(after))


def names_garment(after: str) -> bool:
    """Whether the noun phrase after a preposition names something worn (`a florescent green hoodie`)."""
    return names_any(after, GARMENTS)


def same_form_verbs(verb: str) -> list[str]:
    """Interaction verbs of the keyword's form (`holding` -> `-ing` verbs, `holds` -> `-s` verbs); what is worn is
    held or carried instead (`wearing` -> `holding`)."""
    if verb in WORN:
        return WORN[verb]
    if verb.endswith("ing"):
        return VERBS_ING
    if verb.endswith("s"):
        return VERBS_S
    return []


def fix_article(before: str, new_word: str) -> str:
    """`a` <-> `an` right before the replacement, keeping the original's case."""
    m = re.search(r"\b(a|an)(\s+)$", before, flags=re.IGNORECASE)
    if not m:
        return before
    article = "an" if VOWEL_SOUND.match(new_word) else "a"
    article = match_case(article, m.group(1))
    return before[: m.start(1)] + article + m.group(2)
