"""The losses: Cement (ours, `cement`) and the field's hard-negative losses, one module each, on one batch layout.

Every loss reads the batch `layout` describes (N anchors, K >= 1 negatives each, a missing caption or picture
masked) and is correct under data parallelism as open_clip's `ClipLoss` is (gathered features, global indices).
``forward(image_features, text_features, logit_scale, concreteness, has_negative=None, has_negative_image=None,
output_dict=False)``; with ``output_dict`` a dict with ``contrastive_loss`` and detached diagnostics.

The names below import on first use, so that the losses' options (`loss.options`, the config sections) import
without torch.
"""

__all__ = ["LOSSES", "SCHEDULES", "AdaptiveMargin", "CEClipLoss", "CEClipOptions", "CLICLoss", "CLICOptions",
           "CementLoss", "DeGLALoss",
           "DeGLAOptions", "FSCCLIPLoss", "FSCCLIPOptions", "InverseMargin",
           "NegCLIPLoss", "NegCLIPOptions", "NoMargin", "StaticMargin", "TripletCLIPLoss", "TripletCLIPOptions",
           "anchors_then_negatives", "hard_negative_diagnostics", "make_schedule"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import ce_clip, cement, clic, degla, fsc_clip, layout, negclip, tripletclip

    found = {n: getattr(m, n) for m in (cement, ce_clip, clic, degla, fsc_clip, layout, negclip, tripletclip)
             for n in __all__ if hasattr(m, n)}
    # loss.name -> (the loss, its options: the config section loss.<name>)
    found["LOSSES"] = {
        "negclip": (negclip.NegCLIPLoss, negclip.NegCLIPOptions),
        "tripletclip": (tripletclip.TripletCLIPLoss, tripletclip.TripletCLIPOptions),
        "ce_clip": (ce_clip.CEClipLoss, ce_clip.CEClipOptions),
        "fsc_clip": (fsc_clip.FSCCLIPLoss, fsc_clip.FSCCLIPOptions),
        "degla": (degla.DeGLALoss, degla.DeGLAOptions),
        "clic": (clic.CLICLoss, clic.CLICOptions),
    }
    globals().update(found)
    return found[name]
