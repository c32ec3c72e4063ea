"""A rendered toy world in which the whole method runs offline on a CPU in minutes (`concrete-jungle demo`).

- `world.py`: scenes, captions, the caption parser and the renderer;
- `rewrite.py`: the captioner and editor that plug into ConcretePlant;
- `build.py`: a world on disk, with a SugarCrepe-format compositional test and a retrieval split;
- `attributes.py`: three more test subsets, of the size, light and mood words (`WorldConfig.attribute_subsets`);
- `edit_kinds.py`: each planted record's edit kind and the test subset it matches;
- `viewer.py`: whether a caption reads true of a picture;
- `entailment.py`: whether the anchor's caption is still true of a negative picture (a scorer plugin that decides
  each planted negative's ``anchor_true_of_negative``);
- `faulty.py`: an editor that ignores a seeded share of its prompts, and `separation.py`: how well the plant's pair
  scores tell its good pairs from its bad ones, with the viewer as judge.
"""
