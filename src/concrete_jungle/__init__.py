"""concrete-jungle: concreteness-aware hard negatives (ConcretePlant) and Cement loss for compositional CLIP.

Modules: `concreteness` (ratings), `keywords` (candidates and sampling), `captioners`/`editors` and `plant`
(hard-negative generation), `concretebatch` (the dataset on disk), `loss` (Cement loss), `train`
(Slipform), `evaluation` (benchmarks), `analysis` (Table 1, Fig. 5-6), `gallery`, `cli`.
"""

__version__ = "0.1.0"
