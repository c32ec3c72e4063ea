"""Cleaning and validating LLM rewrites (docs/method.md §2) on real-looking replies."""

import pytest

from concrete_jungle.plant.captioners.prompt import build_prompt
from concrete_jungle.plant.captioners.validation import check_rewrite, clean_reply

CAPTION = "A person wearing a red helmet"
SPAN = (19, 22)  # "red"


@pytest.mark.parametrize("reply, cleaned", [
    ("A person wearing a blue helmet.", "A person wearing a blue helmet."),
    ('"A person wearing a blue helmet."', "A person wearing a blue helmet."),
    ("Output: A person wearing a blue helmet", "A person wearing a blue helmet"),
    ("**Output:** “A person wearing a blue helmet.”", "A person wearing a blue helmet."),
    ("<think>\nThe keyword is red, so I pick blue.\n</think>\n\nA person wearing a blue helmet.",
     "A person wearing a blue helmet."),
    ("A person wearing a blue helmet.\nI replaced red with blue to create a conflict.",
     "A person wearing a blue helmet."),
    ("A person wearing a blue helmet. This changes the colour of the helmet.", "A person wearing a blue helmet."),
    ("  'A person wearing a blue helmet'  ", "A person wearing a blue helmet"),
    ("<think>unfinished thought", ""),
])
def test_clean_reply(reply, cleaned):
    assert clean_reply(reply) == cleaned


@pytest.mark.parametrize("caption, span, category, new, reason", [
    (CAPTION, SPAN, "attribute", "A person wearing a blue helmet.", None),
    (CAPTION, SPAN, "attribute", "", "empty reply"),
    (CAPTION, SPAN, "attribute", "A person wearing a red helmet.", "unchanged caption"),
    (CAPTION, SPAN, "attribute", "a person wearing a red helmet", "unchanged caption"),
    (CAPTION, SPAN, "attribute", "A person wearing a helmet", "keyword removed, not replaced"),
    (CAPTION, SPAN, "attribute", "A person holding a blue helmet", "words outside the keyword changed"),
    (CAPTION, SPAN, "attribute", "A helmet wearing a red person", "words outside the keyword changed"),
    (CAPTION, SPAN, "attribute", "A person wearing a red red helmet", "keyword not replaced"),
    # agreement outside the keyword is allowed
    ("A person wearing a red apron", (19, 22), "attribute", "A person wearing an orange apron", None),
    ("Two dogs are sleeping on a bed", (0, 3), "attribute", "One dog is sleeping on a bed", None),
    # a relation in a multi-word spatial phrase may replace the whole phrase (the paper's own example)
    ("A child standing in front of the tree", (21, 26), "relation", "A child standing behind the tree", None),
    ("A lamp placed to the left of the sofa", (20, 24), "relation", "A lamp placed to the right of the sofa", None),
    ("A cat sitting under a table", (14, 19), "relation", "A cat sitting on a table", None),
    ("A woman holding a coffee cup", (18, 28), "object", "A woman holding a laptop", None),
    ("A dog", (2, 5), "object", "A cat " + "and a very long tail " * 20, "longer than 77 CLIP tokens"),
])
def test_check_rewrite(caption, span, category, new, reason):
    assert check_rewrite(caption, span, category, new) == reason


def test_prompt_is_the_papers_verbatim_with_the_category_examples():
    prompt = build_prompt("A dog on a couch", "dog", "object", "hc")
    assert prompt.startswith("**Task**: You are an expert data engineer.")
    assert "Input: A dog running in the park, Keyword: dog, Output: A cat running in the park." in prompt
    assert prompt.endswith("Input: A dog on a couch Keyword: dog Output:")
    wo = build_prompt("A dog on a couch", "dog", "object", "wo")
    assert "Input: A child standing in front of the tree, Keyword: front" in wo
    assert "A dog running in the park" not in wo
