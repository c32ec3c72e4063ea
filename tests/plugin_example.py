"""A captioner and editors of a user's own, outside the package: what `plant` takes as plugins."""

import threading

from PIL import Image, ImageOps

from concrete_jungle.captioners import Reply


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


class MainThreadMirrorEditor(MirrorEditor):
    """`MirrorEditor` that refuses to run anywhere but on its process's main thread, as some GPU and CPU libraries
    want (torch's CPU kernels ran 1.3x slower on the second thread Ray Data gives an actor by default)."""

    name = "mirror-main-thread"

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(f"edit called on thread {threading.current_thread().name!r}, not the main thread")
        return super().edit(images, prompts, seeds)
