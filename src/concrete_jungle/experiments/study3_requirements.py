"""What Study 3 needs of the code before its first start (docs/studies/study3.md, "Requirements, checked before the
first start"), checked on the code itself so that the runner refuses to start while any is missing:

1. the world generator's test subsets replace_size, replace_light and replace_mood, read false of the picture by
   `toyworld.viewer`, behind `WorldConfig.attribute_subsets` (off: every earlier world as it was);
2. the loss option ``mask_entailed`` in InfoNCE, Cement and NegCLIP's loss;
3. each planted negative's ``anchor_true_of_negative``, decided by the viewer under the rule
   ``viewer_anchor_true>=1`` (`StageConfig.entailment`, ``plant --entailment``);
4. each planted record's edit kind (``edit_kind``, the slot its keyword came from), mapped to a test subset.
"""

from __future__ import annotations

import random
from dataclasses import fields

from ..errors import JobError

STUDY3_LOSSES = ("infonce", "cement", "negclip")
STUDY3_RULE = "viewer_anchor_true>=1"  # design.json's data.entailment


class MissingRequirementError(JobError):
    """A requirement of a study's design that the code does not meet; the message names each."""


def attribute_subsets_problems() -> list[str]:
    from ..toyworld.attributes import ATTRIBUTE_SUBSETS, attribute_test
    from ..toyworld.build import LATER_SETTINGS, WorldConfig
    from ..toyworld.viewer import reads_true
    from ..toyworld.world import sample_scene

    if "attribute_subsets" not in {f.name for f in fields(WorldConfig)} or \
            LATER_SETTINGS.get("attribute_subsets") is not False:
        return ["WorldConfig has no setting attribute_subsets left out of earlier worlds' settings at False"]
    if ATTRIBUTE_SUBSETS != ("replace_size", "replace_light", "replace_mood"):
        return [f"the attribute subsets are {', '.join(ATTRIBUTE_SUBSETS)}, not replace_size, replace_light and "
                "replace_mood"]
    rng = random.Random(0)
    scenes = [sample_scene(rng) for _ in range(40)]
    files = [f"check-{i:06d}.png" for i in range(len(scenes))]
    items, _ = attribute_test(scenes, files, seed=0)
    by_file = dict(zip(files, scenes))
    wrong = [s for s, subset_items in items.items() if not subset_items or any(
        not reads_true(it["caption"], by_file[it["filename"]], scene_words=True)
        or reads_true(it["negative_caption"], by_file[it["filename"]], scene_words=True) for it in subset_items)]
    return [f"test subset {s}: no items, or an item the viewer does not read true / false" for s in wrong]


def mask_entailed_problems() -> list[str]:
    from ..configs import ConfigError
    from ..train.config import LossConfig

    problems = []
    for name in STUDY3_LOSSES:
        try:
            LossConfig(name=name, mask_entailed=True)
        except ConfigError as e:
            problems.append(f"loss {name} does not take mask_entailed: {e}")
    return problems


def entailment_problems() -> list[str]:
    from ..plant.scoring import ScoringConfig
    from ..toyworld.entailment import ViewerScorer
    from .stages import VIEWER_RULE, StageConfig

    problems = [] if "entailment" in {f.name for f in fields(StageConfig)} else [
        "StageConfig has no entailment setting (the viewer deciding each planted negative's anchor_true_of_negative)"]
    rule = ScoringConfig(scorers={"concrete_jungle.toyworld.entailment:ViewerScorer": {}},
                         entailment=VIEWER_RULE).entailment_rule()
    if VIEWER_RULE != STUDY3_RULE or rule.score not in ViewerScorer.scores:
        problems.append(f"the plant's entailment rule is {VIEWER_RULE!r}, not the design's {STUDY3_RULE!r} on a "
                        "score of the viewer")
    return problems


def edit_kind_problems() -> list[str]:
    from ..toyworld.attributes import ATTRIBUTE_SUBSETS
    from ..toyworld.build import SUBSETS
    from ..toyworld.edit_kinds import EDIT_KIND_SUBSET
    from ..toyworld.rewrite import ToyEditor
    from ..toyworld.world import COLOURS, RELATIONS, SHAPES, TEXTURES, WORD_VALUE, word_kind

    problems = [] if callable(getattr(ToyEditor, "meta_fields", None)) else [
        "the toy editor records no edit_kind on its records (ToyEditor.meta_fields)"]
    kinds = {"colour", "texture", "size", "shape", "relation", "light", "mood"}
    if set(EDIT_KIND_SUBSET) != kinds or not set(EDIT_KIND_SUBSET.values()) <= {*SUBSETS, *ATTRIBUTE_SUBSETS}:
        problems.append("EDIT_KIND_SUBSET does not map each of colour, texture, size, shape, relation, light and mood "
                        "to a test subset the world writes")
    unmapped = sorted({word_kind(w) for w in (*SHAPES, *COLOURS, *TEXTURES, *WORD_VALUE, *RELATIONS)} - set(kinds))
    if unmapped:
        problems.append(f"the toy world's words are of kinds {', '.join(unmapped)}, which map to no test subset")
    return problems


def check_study3_requirements(design: dict | None = None) -> None:
    """Raise `MissingRequirementError` naming every requirement of Study 3 the code does not meet; with ``design``
    (its design.json), also every test subset, loss or entailment rule it names that the code does not have."""
    from ..toyworld.attributes import ATTRIBUTE_SUBSETS
    from ..toyworld.build import SUBSETS

    found = {"(1) the test subsets replace_size, replace_light and replace_mood": attribute_subsets_problems(),
             "(2) mask_entailed in InfoNCE, Cement and NegCLIP's loss": mask_entailed_problems(),
             "(3) each planted negative's anchor_true_of_negative, decided by the viewer": entailment_problems(),
             "(4) each planted record's edit kind, mapped to a test subset": edit_kind_problems()}
    if design is not None:
        unknown = [s for s in design["world"]["test_subsets"] if s not in (*SUBSETS, *ATTRIBUTE_SUBSETS)]
        losses = [name for name in design["finetune"]["losses"] if name not in STUDY3_LOSSES]
        found["the design's names"] = [f"test subset {s} is none the world writes" for s in unknown] + [
            f"loss {name} is not among {', '.join(STUDY3_LOSSES)}" for name in losses] + (
            [] if design["data"]["entailment"] == STUDY3_RULE else
            [f"entailment rule {design['data']['entailment']!r} is not {STUDY3_RULE!r}"])
    missing = [f"{what}: {'; '.join(problems)}" for what, problems in found.items() if problems]
    if missing:
        raise MissingRequirementError("Study 3 cannot start; missing: " + " | ".join(missing))
