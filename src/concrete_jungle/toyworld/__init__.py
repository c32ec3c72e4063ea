"""A rendered toy world in which the whole method runs offline on a CPU in minutes (`concrete-jungle demo`).

- `world.py`: scenes, captions, the caption parser and the renderer;
- `rewrite.py`: the captioner and editor that plug into ConcretePlant;
- `build.py`: a world on disk, with a SugarCrepe-format compositional test and a retrieval split.
"""
