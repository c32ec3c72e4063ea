"""The caption-rewrite prompt: the paper's App. A.2 verbatim, with the chosen category's in-context examples.

This is the only place the prompt text lives; `plant` stores `PROMPT_TEMPLATE` and `EXAMPLES` in the
dataset's config so a dataset records exactly what the LLM was asked.
"""

from __future__ import annotations

PROMPT_TEMPLATE = (
    "**Task**: You are an expert data engineer. Given a conceptual caption, your goal is to generate a new caption "
    "that is physically and grammatically correct but factually mismatched to the original image. "
    "**Instruction**: 1. You will be provided with an original caption and a target keyword present in the caption. "
    "2. Locate the keyword within the caption and replace it with a new word or phrase that creates a clear visual "
    "conflict. 3. Keep the sentence structure, grammar, and all other words identical to the original. "
    "4. The output must be physically sensible (e.g., \"A hat wearing a man\" is NOT allowed). "
    "5. ONLY output the new caption, do not include reasons for the output. **Examples**: {examples} "
    "Input: {caption} Keyword: {keyword} Output:"
)

# (input, keyword, output) triples of App. A.2; `wo` uses the "without considering concreteness" set
EXAMPLES: dict[str, list[tuple[str, str, str]]] = {
    "attribute": [
        ("A person wearing a red helmet", "red", "A person wearing a blue helmet."),
        ("A wooden boat floating on the water", "wooden", "A plastic boat floating on the water."),
        ("The cloudy sky over the city", "cloudy", "The clear sky over the city."),
    ],
    "relation": [
        ("A cat sitting under a table", "under", "A cat sitting on a table."),
        ("A child standing in front of the tree", "front", "A child standing behind the tree."),
        ("A lamp placed to the left of the sofa", "left", "A lamp placed to the right of the sofa."),
    ],
    "object": [
        ("A dog running in the park", "dog", "A cat running in the park."),
        ("A woman holding a coffee cup", "coffee cup", "A woman holding a laptop."),
        ("A car driving on the highway", "highway", "A car driving on the grass."),
    ],
    "without concreteness": [
        ("A person wearing a red helmet", "red", "A person wearing a blue helmet."),
        ("A child standing in front of the tree", "front", "A child standing behind the tree."),
        ("A car driving on the highway", "highway", "A car driving on the grass."),
    ],
}


def examples_for(category: str, mode: str) -> list[tuple[str, str, str]]:
    return EXAMPLES["without concreteness" if mode == "wo" else category]


def build_prompt(caption: str, keyword: str, category: str, mode: str) -> str:
    """The full prompt for one caption (docs/method.md §2)."""
    shots = " ".join(f"Input: {i}, Keyword: {k}, Output: {o}" for i, k, o in examples_for(category, mode))
    return PROMPT_TEMPLATE.format(examples=shots, caption=caption, keyword=keyword)
