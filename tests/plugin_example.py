"""A captioner and editors of a user's own, outside the package: what `plant` takes as plugins."""

import threading

from PIL import Image, ImageOps

from concrete_jungle.plant.captioners import Reply


class PurpleCaptioner:
    """Replaces the keyword with "purple" (an attribute) or "teapot" (anything else)."""

    def __init__(self, object_word: str = "teapot"):
        self.object_word = object_word
        self.name = f"purple:{object_word}"

    def rewrite(self, requests):
        return [Reply(r.caption[: r.span[0]] + ("purple" if r.category == "attribute" else self.object_word)
                      + r.caption[r.span[1]:]) for r in requests]

    def close(self):
        pass


class MirrorEditor:
    """The anchor mirrored left to right: a negative that differs everywhere, made without a model."""

    name = "mirror"
    reuses_anchor = False

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]:
        return [ImageOps.mirror(im) for im in images]


class NamingMirrorEditor(MirrorEditor):
    """`MirrorEditor` that writes a field of its own into each record's metadata: the keyword it was told of."""

    name = "mirror-naming"

    def meta_fields(self, keyword: str, caption: str, prompt: str) -> dict:
        return {"mirrored_keyword": keyword, "prompt_is_caption": prompt == caption}


class MainThreadMirrorEditor(MirrorEditor):
    """`MirrorEditor` that refuses to run anywhere but on its process's main thread, as some GPU and CPU libraries
    want (torch's CPU kernels ran 1.3x slower on the second thread Ray Data gives an actor by default)."""

    name = "mirror-main-thread"

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(f"edit called on thread {threading.current_thread().name!r}, not the main thread")
        return super().edit(images, prompts, seeds)


class CountingCaptioner(PurpleCaptioner):
    """`PurpleCaptioner` that counts the requests it is asked, class-wide (the plant builds its own instance)."""

    requests = 0

    def rewrite(self, requests):
        CountingCaptioner.requests += len(requests)
        return super().rewrite(requests)


class CountingEditor(MirrorEditor):
    """`MirrorEditor` that counts the pictures it edits, class-wide; with ``stop_at`` set, its call of that number
    stops the run as Ctrl-C would."""

    name = "counting-mirror"
    edited, calls, stop_at = 0, 0, None

    def edit(self, images, prompts, seeds):
        CountingEditor.calls += 1
        if CountingEditor.stop_at is not None and CountingEditor.calls >= CountingEditor.stop_at:
            raise KeyboardInterrupt
        CountingEditor.edited += len(images)
        return super().edit(images, prompts, seeds)


class PixelChangeScorer:
    """A scorer of one's own: how far the negative picture moved from the anchor (the mean absolute difference of
    their pixels, 0 to 1), without a model; counts the pairs it scores, class-wide."""

    scores = ("pixel_change",)
    scored = 0

    def __init__(self, device: str = "cpu"):
        self.name, self.version = "pixel-change", "1"

    def score(self, pairs):
        import numpy as np

        PixelChangeScorer.scored += len(pairs)
        return {"pixel_change": [None if p.neg_image is None else float(np.abs(
            np.asarray(p.image, dtype=float) - np.asarray(p.neg_image.resize(p.image.size), dtype=float)).mean() / 255)
            for p in pairs]}


# plugins that break the contract, as a user's first try might (tests/test_plugins.py)


class ShortEditor(MirrorEditor):
    """Returns one image too few."""

    name = "short"

    def edit(self, images, prompts, seeds):
        return super().edit(images, prompts, seeds)[:-1]


class OverwritingEditor(MirrorEditor):
    """Names a field the plant writes itself among its metadata fields."""

    name = "overwriting"

    def meta_fields(self, keyword, caption, prompt):
        return {"keyword": "mirror"}


class DrawingEditor:
    """Draws on the images it is given (in place), then returns them: the stored anchors must not change."""

    name = "drawing"
    reuses_anchor = False

    def edit(self, images, prompts, seeds):
        for im in images:
            im.paste((255, 0, 0), (0, 0, im.width, im.height))
        return images


class StrCaptioner(PurpleCaptioner):
    """Returns strings instead of `Reply` objects, and has no close()."""

    close = None

    def rewrite(self, requests):
        return [reply.text for reply in super().rewrite(requests)]


class NoCloseCaptioner:
    """The README's interface and nothing more: a name and rewrite(); no close()."""

    name = "no-close"

    def rewrite(self, requests):
        return [Reply(r.caption[: r.span[0]] + "teapot" + r.caption[r.span[1]:]) for r in requests]


class RaisingCaptioner(NoCloseCaptioner):
    name = "raising"

    def rewrite(self, requests):
        raise ConnectionError("the server went away")


def a_function_not_a_class(requests):
    return []
