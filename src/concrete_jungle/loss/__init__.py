"""The losses: Cement (ours, `cement`) and the field's hard-negative losses, one module each, on one batch layout.

Every loss reads the batch `layout` describes (N anchors, K >= 1 negatives each, a missing caption or picture
masked) and is correct under data parallelism as open_clip's `ClipLoss` is (gathered features, global indices).
``forward(image_features, text_features, logit_scale, concreteness, has_negative=None, has_negative_image=None,
output_dict=False)``; with ``output_dict`` a dict with ``contrastive_loss`` and detached diagnostics.
"""

from .cement import (SCHEDULES, AdaptiveMargin, CementLoss, InverseMargin, NoMargin, StaticMargin,
                     hard_negative_diagnostics, make_schedule)
from .ce_clip import CEClipLoss, CEClipOptions
from .clic import CLICLoss, CLICOptions
from .degla import DeGLALoss, DeGLAOptions
from .fsc_clip import FSCCLIPLoss, FSCCLIPOptions
from .layout import anchors_then_negatives
from .negclip import NegCLIPLoss, NegCLIPOptions
from .tripletclip import TripletCLIPLoss, TripletCLIPOptions

# loss.name -> (the loss, its options: the config section loss.<name>)
LOSSES: dict[str, tuple[type, type]] = {
    "negclip": (NegCLIPLoss, NegCLIPOptions),
    "tripletclip": (TripletCLIPLoss, TripletCLIPOptions),
    "ce_clip": (CEClipLoss, CEClipOptions),
    "fsc_clip": (FSCCLIPLoss, FSCCLIPOptions),
    "degla": (DeGLALoss, DeGLAOptions),
    "clic": (CLICLoss, CLICOptions),
}

__all__ = ["LOSSES", "SCHEDULES", "AdaptiveMargin", "CEClipLoss", "CEClipOptions", "CLICLoss", "CLICOptions",
           "CementLoss", "DeGLALoss",
           "DeGLAOptions", "FSCCLIPLoss", "FSCCLIPOptions", "InverseMargin",
           "NegCLIPLoss", "NegCLIPOptions", "NoMargin", "StaticMargin", "TripletCLIPLoss", "TripletCLIPOptions",
           "anchors_then_negatives", "hard_negative_diagnostics", "make_schedule"]
