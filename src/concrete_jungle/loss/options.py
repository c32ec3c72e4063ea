"""The options of the field's losses (`loss/`), the config sections ``loss.<name>`` of a training config: typed,
validated, their defaults the published recipes (each field says where it comes from). Kept apart from the losses
so that a config is read and checked without importing torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

# loss.name (and `train --loss`) -> Cement's margin schedule (`loss/cement.py` SCHEDULES): Cement is the adaptive
# margin, InfoNCE no margin, and the paper's two ablations
LOSS_SCHEDULES = {"cement": "adaptive", "infonce": "none", "static": "static", "inverse": "inverse"}
# the field's losses (`loss.LOSSES`), each configured by its section loss.<name>
PEER_LOSSES = ("negclip", "tripletclip", "ce_clip", "fsc_clip", "degla", "clic")
LOSS_NAMES = (*LOSS_SCHEDULES, *PEER_LOSSES)

THRESHOLDS = ("mean", "max", "fixed")
NORMALIZERS = ("minmax", "softmax")


def unread(options, keys: tuple[str, ...], section: str, why: str, fix: str) -> list[str]:
    """One problem per key of ``keys`` whose value differs from its default in a section whose other settings
    leave it unread (``why``): a value that changes nothing must not look as if it did. A key left at its default
    is the run without it, so a printed or recorded config (every key written out) reads back."""
    defaults = {f.name: f.default for f in fields(options)}
    return [f"loss.{section}.{key} {getattr(options, key)!r} is not read: {why}; remove it or {fix}"
            for key in keys if getattr(options, key) != defaults[key]]


@dataclass(frozen=True)
class NegCLIPOptions:
    # Negatives with a picture join the batch as images with their captions (the later version: HEAD of the
    # released code, the batch its README describes); false: only the captions (the first version, which
    # TripletCLIP's and CE-CLIP's code call NegCLIP). Data whose negatives have no picture: the same loss either way.
    negative_images: bool = True

    def __post_init__(self):
        if not isinstance(self.negative_images, bool):
            raise ValueError(f"loss.negclip.negative_images must be true or false, got {self.negative_images!r}")

    def unread(self) -> list[str]:
        return []


@dataclass(frozen=True)
class TripletCLIPOptions:
    """TripletCLIP's loss has no hyper-parameter of its own: the released code adds the two NegCLIP terms with
    weight 1 and takes the logit scale from the model (its training hyper-parameters are the recipe's)."""

    # without a single negative picture its second half has no row and the loss is NegCLIP's first version: a
    # run on such data is refused unless this says that is meant
    allow_caption_only: bool = False

    def __post_init__(self):
        if not isinstance(self.allow_caption_only, bool):
            raise ValueError("loss.tripletclip.allow_caption_only must be true or false, got "
                             f"{self.allow_caption_only!r}")

    def unread(self) -> list[str]:
        return []


@dataclass(frozen=True)
class CEClipOptions:
    hard_negatives: bool = True  # negatives as image-to-text columns (--hardnegative, run_multiple_nodes.sh)
    imc_weight: float = 0.3  # intra-modal contrastive (--imc-loss-weight 0.3, run_multiple_nodes.sh); 0: off
    cmr_weight: float = 0.2  # cross-modal rank (--cmr-loss-weight 0.2, run_multiple_nodes.sh); 0: off
    threshold: str = "mean"  # adaptive threshold: "mean", "max" or "fixed" (--threshold-type, params.py)
    fixed_threshold: float = 2.0  # tau with threshold "fixed" (--fixed-threshold-value default, params.py)
    threshold_upper_bound: float | None = 10.0  # clamp of "mean"/"max" to [0, bound]; None: no clamp (--upper-bound)

    def __post_init__(self):
        for key in ("imc_weight", "cmr_weight", "fixed_threshold"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"loss.ce_clip.{key} must be a finite number, got {value!r}")
        for key in ("imc_weight", "cmr_weight"):
            if getattr(self, key) < 0:
                raise ValueError(f"loss.ce_clip.{key} must be >= 0 (0 switches the term off), got {getattr(self, key)}")
        if not isinstance(self.hard_negatives, bool):
            raise ValueError(f"loss.ce_clip.hard_negatives must be true or false, got {self.hard_negatives!r}")
        if self.threshold not in THRESHOLDS:
            raise ValueError(f"loss.ce_clip.threshold must be one of {', '.join(THRESHOLDS)}, got {self.threshold!r}")
        bound = self.threshold_upper_bound
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))
                                  or not math.isfinite(bound) or bound < 0):
            raise ValueError(f"loss.ce_clip.threshold_upper_bound must be a number >= 0 or null, got {bound!r}")

    def unread(self) -> list[str]:
        """The options these settings leave unread: the thresholds feed the rank loss alone, the fixed one is
        used only with threshold: fixed and the upper bound only with the adaptive ones."""
        if not self.cmr_weight:
            return unread(self, ("threshold", "fixed_threshold", "threshold_upper_bound"), "ce_clip",
                          "its thresholds are the rank loss's, and cmr_weight 0 switches that off",
                          "give loss.ce_clip.cmr_weight a weight")
        if self.threshold == "fixed":
            return unread(self, ("threshold_upper_bound",), "ce_clip",
                          "the bound clamps the adaptive thresholds, and threshold is fixed",
                          "set loss.ce_clip.threshold: mean or max")
        return unread(self, ("fixed_threshold",), "ce_clip",
                      f"it is the threshold of threshold: fixed, and threshold is {self.threshold}",
                      "set loss.ce_clip.threshold: fixed")


@dataclass(frozen=True)
class FSCCLIPOptions:
    """FSC-CLIP's hyper-parameters; defaults are the README's recipe for ViT-B-32 on COCO and LAION-COCO
    (the command-line names of ``src/training/params.py`` in brackets)."""

    global_negatives: bool = True  # the global hard-negative loss [--apply-global-neg-loss]
    global_weight: float = 0.5  # its weight w_g [--neg-loss-weight 0.5; the README's CC-3M recipe: 1.0]
    local_negatives: bool = True  # the local (token-patch) hard-negative loss [--apply-local-neg-loss]
    local_weight: float = 0.2  # its weight w_l [--local-neg-weight 0.2; ViT-B-16 and ViT-L-14 recipes: 0.5]
    focal: bool = True  # focal loss on the hard-negative choice; False: cross-entropy [--neg-loss-name focal_loss]
    focal_gamma: float = 2.0  # gamma [--focal-gamma 2.0]
    label_smoothing: float = 0.02  # eps of the calibrated regularisation; 0 switches it off [--neg-label-smoothing]
    sim_normalizer: str = "minmax"  # token-to-patch weights: min-max rescaled or softmax [--sim-normalizer]
    sim_sparsify: bool = False  # drop patches below 1/P of the min-max weight [--sim-sparsify]

    def __post_init__(self):
        for key in ("global_negatives", "local_negatives", "focal", "sim_sparsify"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"loss.fsc_clip.{key} must be true or false, got {getattr(self, key)!r}")
        for key in ("global_weight", "local_weight", "focal_gamma"):
            if not 0 <= getattr(self, key) < math.inf:
                raise ValueError(f"loss.fsc_clip.{key} must be a finite number >= 0, got {getattr(self, key)}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"loss.fsc_clip.label_smoothing must be in [0, 1), got {self.label_smoothing} "
                             "(0 switches the calibrated regularisation off)")
        if self.sim_normalizer not in NORMALIZERS:
            raise ValueError(f"loss.fsc_clip.sim_normalizer must be one of {', '.join(NORMALIZERS)}, got "
                             f"{self.sim_normalizer!r}")
        if self.sim_sparsify and self.sim_normalizer != "minmax":
            raise ValueError("loss.fsc_clip.sim_sparsify works on min-max weights: set sim_normalizer: minmax "
                             "or sim_sparsify: false")

    def unread(self) -> list[str]:
        """The options these settings leave unread: each hard-negative loss's own, when it is off; the choice's
        focal loss and smoothing when both are off; gamma without the focal loss."""
        problems = []
        if not self.global_negatives:
            problems += unread(self, ("global_weight",), "fsc_clip", "global_negatives is false",
                               "set loss.fsc_clip.global_negatives: true")
        if not self.local_negatives:
            problems += unread(self, ("local_weight", "sim_normalizer", "sim_sparsify"), "fsc_clip",
                               "the local loss reads it, and local_negatives is false",
                               "set loss.fsc_clip.local_negatives: true")
        if not (self.global_negatives or self.local_negatives):
            problems += unread(self, ("focal", "focal_gamma", "label_smoothing"), "fsc_clip",
                               "it shapes the hard-negative losses, and global_negatives and local_negatives are "
                               "both false", "switch one of them on")
        elif not self.focal:
            problems += unread(self, ("focal_gamma",), "fsc_clip",
                               "it is the focal loss's gamma, and focal is false (cross-entropy)",
                               "set loss.fsc_clip.focal: true")
        return problems


@dataclass(frozen=True)
class DeGLAOptions:
    """DeGLA's hyper-parameters; defaults are its released recipe (``scripts/train_DeGLA.sh``, flags in brackets).
    A weight of 0 switches its term off."""

    igc_weight: float = 0.1  # image-grounded contrast [--image_local_contrast --image_local_weight 0.1]
    tgc_weight: float = 0.1  # text-grounded contrast [--text_local_contrast --text_local_weight 0.1]
    tgc_scale: float = 10.0  # tau: fixed, not the learned scale (loss.py, get_text_local_loss: logit_scale = 10.0)
    distill_weight: float = 0.005  # self-distillation, summed squared distance [--distill_mse --distill_weight 0.005]
    ema_decay: float = 0.9996  # teacher <- d teacher + (1 - d) model after each step [--ema_alpha 0.9996];
    # 1 keeps the starting model as a frozen teacher (the recipe without --ema_teacher)

    def __post_init__(self):
        for key in ("igc_weight", "tgc_weight", "distill_weight"):
            if not 0 <= getattr(self, key) < math.inf:
                raise ValueError(f"loss.degla.{key} must be a finite number >= 0 (0 switches the term off), got "
                                 f"{getattr(self, key)}")
        if not 0 < self.tgc_scale < math.inf:
            raise ValueError(f"loss.degla.tgc_scale must be a finite number > 0, got {self.tgc_scale}")
        if not 0 <= self.ema_decay <= 1:
            raise ValueError(f"loss.degla.ema_decay must be in [0, 1] (1: a frozen teacher), got {self.ema_decay}")

    def unread(self) -> list[str]:
        """The options these settings leave unread: TGC's scale without TGC, the teacher's decay when no term
        reads a teacher (TGC and the distillation do; with both off no teacher is kept)."""
        problems = []
        if not self.tgc_weight:
            problems += unread(self, ("tgc_scale",), "degla", "it is the text-grounded contrast's scale, and "
                               "tgc_weight 0 switches that off", "give loss.degla.tgc_weight a weight")
            if not self.distill_weight:
                problems += unread(self, ("ema_decay",), "degla", "no teacher is kept: tgc_weight and "
                                   "distill_weight are 0, and only those terms read one",
                                   "give one of them a weight")
        return problems


@dataclass(frozen=True)
class CLICOptions:
    """CLIC's weights (equation 7 of its paper); defaults are its released recipe (``utils/train_args.py``
    defaults, the flags of ``trigger_train.sh`` in brackets). A weight of 0 switches its term off."""

    contrastive_weight: float = 0.5  # the contrastive terms, one per positive [--cont 0.5]
    negative_weight: float = 0.5  # each positive against the hard negative [--sneg 0.5, --hard_negatives_separate]
    uni_weight: float = 1.0  # squared distance of the first two positives [--uni 1, --uni_modal_loss]

    def __post_init__(self):
        for key in ("contrastive_weight", "negative_weight", "uni_weight"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"loss.clic.{key} must be a finite number >= 0 (0 switches the term off), got "
                                 f"{value!r}")
        if not (self.contrastive_weight or self.negative_weight or self.uni_weight):
            raise ValueError("loss.clic: every weight is 0, so the loss is 0; give one of contrastive_weight, "
                             "negative_weight and uni_weight a weight")

    def unread(self) -> list[str]:
        return []
