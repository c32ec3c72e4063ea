"""Study 3's requirements, checked on the code before its first start: all are met, and a design naming what the
code lacks is refused naming each."""

import json
from pathlib import Path

import pytest

from concrete_jungle.experiments.study3_requirements import MissingRequirementError, check_study3_requirements
from concrete_jungle.train.config import LossConfig

DESIGN = Path(__file__).parents[1] / "docs" / "studies" / "study3" / "design.json"


@pytest.mark.parametrize("name", ["infonce", "cement", "negclip"])
def test_study3_s_losses_take_mask_entailed(name):
    assert LossConfig(name=name, mask_entailed=True).mask_entailed


def test_every_requirement_of_study3_s_committed_design_is_met():
    check_study3_requirements()
    check_study3_requirements(json.loads(DESIGN.read_text()))


def test_a_design_naming_what_the_code_lacks_is_refused_naming_each():
    design = json.loads(DESIGN.read_text())
    design["world"]["test_subsets"] = [*design["world"]["test_subsets"], "replace_count"]
    design["finetune"]["losses"] = {**design["finetune"]["losses"], "tripletclip": {}}
    design["data"]["entailment"] = "viewer_anchor_true>=0.5"
    with pytest.raises(MissingRequirementError) as refused:
        check_study3_requirements(design)
    message = str(refused.value)
    assert message.startswith("Study 3 cannot start; missing: the design's names: ")
    for named in ("test subset replace_count is none the world writes", "loss tripletclip is not among infonce, "
                  "cement, negclip", "entailment rule 'viewer_anchor_true>=0.5' is not 'viewer_anchor_true>=1'"):
        assert named in message
