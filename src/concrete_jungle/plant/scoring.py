"""Scores on every planted pair and the gates on them (docs/method.md §3, "Scores and gates").

`ScoringConfig` names the scorers (`scorers/`: plugins, as captioners and editors are); `PairScorers` runs them on
each edited batch, on the editor's device, and gives every pair its scores and the model that made each. A `Gate`
(``agreement>=0.0``) is a threshold on one score: a pair that fails a gate is a reject whose reason names the gate
and the value; its record is kept beside the shard (`gates.py`) so that a re-plant with other gates decides again
from the stored scores, with no new rewrite, edit or score. ``scoring.entailment`` (``agreement_negative<0.0``) is a
rule of the same form that decides, from one score, whether the anchor's caption is still true of the negative
picture (`decide_entailment`): each record's negative gets ``anchor_true_of_negative`` and how it was decided.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..configs import ConfigError
from ..errors import PlantError
from .scorers import DEFAULT_SCORERS, ScorePair


@dataclass(frozen=True)
class ScoringConfig:
    """Which scorers score every pair (name -> its constructor's options; see `scorers/`) and on which device
    (None: the editor's, else cuda when there is one)."""

    scorers: dict[str, dict] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_SCORERS.items()})
    device: str | None = None
    # SCORE<op>NUMBER: the anchor's caption is true of the negative picture where the pair's score compares so
    # (`decide_entailment`); None: not decided, every negative's anchor_true_of_negative unknown
    entailment: str | None = None

    def __post_init__(self):
        problems = [] if self.scorers else ["scoring.scorers is empty; name a scorer (bertscore, dino, open_clip, "
                                            "a plugin) or leave scoring out"]
        problems += [f"scoring.scorers.{name}: {'device'!r} is not a scorer option; give it as scoring.device"
                     for name, options in self.scorers.items() if isinstance(options, dict) and "device" in options]
        if problems:
            raise ConfigError(*problems)
        if self.entailment is not None:  # a rule that does not parse is an error before any run
            self.entailment_rule()

    def entailment_rule(self) -> Gate | None:
        return None if self.entailment is None else Gate.parse(self.entailment, "scoring.entailment",
                                                               "agreement_negative<0.0")


GATE = re.compile(r"\s*([A-Za-z_]\w*)\s*(>=|<=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*")
COMPARE = {">=": lambda v, t: v >= t, "<=": lambda v, t: v <= t, ">": lambda v, t: v > t, "<": lambda v, t: v < t}


@dataclass(frozen=True)
class Gate:
    """``score op threshold``: a pair passes when its score compares so; a score the pair does not have (None: an
    image score of a text-only negative) passes."""

    score: str
    op: str
    threshold: float

    @classmethod
    def parse(cls, text: str, what: str = "gate", example: str = "agreement>=0.0 or image_sim<=0.95") -> Gate:
        found = GATE.fullmatch(text) if isinstance(text, str) else None
        if found is None:
            raise ConfigError(f"{what} {text!r} is not SCORE>=NUMBER (or <=, >, <), e.g. {example}")
        return cls(found[1], found[2], float(found[3]))

    def __str__(self) -> str:
        return f"{self.score}{self.op}{self.threshold!r}"

    def passes(self, value: float | None) -> bool:
        return value is None or COMPARE[self.op](value, self.threshold)


def parse_gates(texts) -> list[Gate]:
    return [Gate.parse(t) for t in texts]


def gate_reason(gates: list[Gate], scores: dict) -> str | None:
    """Why a pair with ``scores`` is gated (every gate it fails, with its value; counted under the first), or
    None when it passes them all."""
    failed = [g for g in gates if not g.passes(scores.get(g.score))]
    return "; ".join(f"gate {g} failed: {g.score} = {scores[g.score]:.6g}" for g in failed) or None


def decide_entailment(rule: Gate, scores: dict, models: dict) -> tuple[bool | None, dict]:
    """(``anchor_true_of_negative``, ``entailment``) of a pair under ``rule``: True where its score compares so, False
    where it does not, None (unknown) where the pair has no such score; ``entailment`` records the rule, its score,
    threshold and the model that made the score."""
    value = scores.get(rule.score)
    how = {"by": "score", "score": rule.score, "rule": str(rule), "threshold": rule.threshold,
           "model": models.get(rule.score, "unknown")}
    return (None if value is None else COMPARE[rule.op](value, rule.threshold)), how


# a text-only negative's picture is its anchor's: the anchor's caption is true of it, whatever a score says
SAME_PICTURE = {"by": "neg_image_is_anchor"}


def declared_scores(scoring: ScoringConfig) -> dict[str, str]:
    """Score name -> the scorer that gives it, from the scorers' classes (imported, not built); two scorers giving
    one score is an error (one would overwrite the other)."""
    from .plugins import load_class

    owner: dict[str, str] = {}
    for name in scoring.scorers:
        scores = getattr(load_class("scorer", name), "scores", None)
        if not (isinstance(scores, (tuple, list)) and scores and all(isinstance(s, str) for s in scores)):
            raise PlantError(f"scorer {name!r} declares no scores: give its class a `scores` tuple of names")
        for score in scores:
            if score in owner:
                raise PlantError(f"scorers {owner[score]!r} and {name!r} both give the score {score!r}; keep one")
            owner[score] = name
    return owner


def check_scoring(scoring: ScoringConfig | None, gates: list[Gate], device: str = "cpu") -> list[str]:
    """The scorers import, declare their scores and take their options (their own checks: models that can be had),
    and every gate names a score one of them gives; nothing is loaded. Returns the notes the scorers give."""
    from .plugins import check

    if scoring is None:  # and no gates: `PlantConfig` refuses gates without scores
        return []
    owner = declared_scores(scoring)
    rule = scoring.entailment_rule()
    unknown = [(f"gate {g}", g) for g in gates if g.score not in owner] + (
        [(f"scoring.entailment {rule}", rule)] if rule is not None and rule.score not in owner else [])
    if unknown:
        raise ConfigError(f"{unknown[0][0]}: no scorer gives {unknown[0][1].score!r}; the scorers give "
                          f"{', '.join(owner)}")
    notes = [check("scorer", name, options | {"device": scoring.device or device})
             for name, options in scoring.scorers.items()]
    return [note for note in notes if note]


def scoring_device(scoring: ScoringConfig, editor) -> str:
    """The configured device, else the editor's (its ``device``), else cuda when there is one."""
    if scoring.device:
        return scoring.device
    device = getattr(editor, "device", None)
    if isinstance(device, str) and device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class PairScorers:
    """The configured scorers, built on ``device``: `score` gives each pair its scores and ``models`` names the
    model of each score (``scorer name@version``)."""

    def __init__(self, scoring: ScoringConfig, device: str):
        from .scorers import make_scorer

        self.scorers = [make_scorer(name, device, **options) for name, options in scoring.scorers.items()]
        self.models = {score: f"{s.name}@{getattr(s, 'version', 'unknown')}"
                       for s in self.scorers for score in type(s).scores}

    def score(self, pairs: list[ScorePair], call) -> list[dict]:
        """Each pair's scores; ``call`` is how the plant calls a plugin (`stages.call_plugin`: what it raises is
        one error naming it)."""
        out: list[dict] = [{} for _ in pairs]
        for scorer in self.scorers:
            values = call("scorer", scorer, "score", pairs)
            for score in type(scorer).scores:
                got = values.get(score) if isinstance(values, dict) else None
                if not isinstance(got, (list, tuple)) or len(got) != len(pairs):
                    raise PlantError(f"scorer {scorer.name!r} returned no list of {len(pairs)} values for "
                                     f"{score!r}; score() returns {{score: [one number or None per pair]}}")
                for scores, value in zip(out, got):
                    scores[score] = checked_value(scorer, score, value)
        return out


def checked_value(scorer, score: str, value) -> float | None:
    if value is None:
        return None
    try:  # an int past float's range (10**400) is no finite number either
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:40]}... ({len(repr(value))} characters)"
        raise PlantError(f"scorer {scorer.name!r} gave {score} = {shown}; a score is a finite number or None: fix "
                         "the scorer's score()")
    return number


def score_and_gate(entries: list[list], pairs: dict[int, ScorePair], scorers: PairScorers, gates: list[Gate],
                   call, entailment: Gate | None = None) -> None:
    """Score the pairs of a batch (``pairs``: entry index -> its pair) and gate them: each entry's manifest row
    and record metadata get ``scores`` and ``score_models``; a row whose pair fails a gate becomes a reject of the
    ``gate`` stage (its record is kept for the gated store). With an ``entailment`` rule, each record's negative
    gets its ``anchor_true_of_negative`` and ``entailment`` (in ``negatives``; a text-only negative's is true)."""
    if not pairs:
        return
    for at, scores in zip(pairs, scorers.score(list(pairs.values()), call)):
        row, record = entries[at]
        record[5].update(scores=scores, score_models=scorers.models)
        row.update(scores=scores, score_models=scorers.models)
        if entailment is not None:
            entailed, how = (True, SAME_PICTURE) if pairs[at].neg_image is None else \
                decide_entailment(entailment, scores, scorers.models)
            record[5]["negatives"] = [{"concreteness": record[5]["concreteness"], "anchor_true_of_negative": entailed,
                                       "entailment": how}]
        reason = gate_reason(gates, scores)
        if reason is not None:
            row.update(status="rejected", reason=reason, stage="gate")
