"""Image editors: the diffusers img2img editor on a tiny SDXL pipeline built here, and `none`."""

import numpy as np
import pytest
from PIL import Image

from concrete_jungle.plant.editors import NoEditor, make_editor


@pytest.fixture(scope="module")
def tiny_sdxl(tmp_path_factory):
    from concrete_jungle.models.tiny import build_tiny_sdxl_img2img

    return build_tiny_sdxl_img2img(tmp_path_factory.mktemp("sdxl") / "tiny-sdxl")


def images(n):
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (48 + 8 * i, 64, 3), dtype=np.uint8)) for i in range(n)]


def test_diffusers_editor_shapes_seeds_and_batching(tiny_sdxl):
    editor = make_editor("diffusers", model=str(tiny_sdxl), size=64, batch_size=3, strength=0.75, steps=4)
    assert editor.name.startswith("diffusers:") and not editor.reuses_anchor
    prompts = ["a blue helmet", "a cat on a table", "a blue helmet", "a red car"]
    out = editor.edit(images(4), prompts, seeds=[1, 2, 1, 3])
    assert [im.size for im in out] == [(64, 64)] * 4
    arr = [np.asarray(im, dtype=np.int16) for im in out]
    again = [np.asarray(im, dtype=np.int16) for im in editor.edit(images(4), prompts, seeds=[1, 2, 1, 3])]
    assert all((a == b).all() for a, b in zip(arr, again))  # same seeds, same images
    other = np.asarray(editor.edit(images(1), prompts[:1], seeds=[99])[0], dtype=np.int16)
    assert np.abs(other - arr[0]).max() > 0  # another seed, another image
    # one at a time gives the images of the batch (each sample has its own generator)
    single = make_editor("diffusers", model=str(tiny_sdxl), size=64, batch_size=1)
    alone = [np.asarray(im, dtype=np.int16) for im in single.edit(images(4), prompts, seeds=[1, 2, 1, 3])]
    assert all(np.abs(a - b).max() <= 2 for a, b in zip(arr, alone))


def test_diffusers_editor_rejects_steps_that_denoise_nothing(tiny_sdxl):
    with pytest.raises(ValueError, match=r"int\(steps \* strength\) must be >= 1"):
        make_editor("diffusers", model=str(tiny_sdxl), steps=1, strength=0.5)


def test_no_editor_reuses_the_anchor():
    ims = images(2)
    assert NoEditor().edit(ims, ["x", "y"], [0, 1]) == ims and NoEditor().reuses_anchor
    with pytest.raises(ValueError, match="editor 'photoshop' is neither known"):
        make_editor("photoshop")
