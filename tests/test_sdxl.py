"""SDXL-Turbo at full size from the repository's configs: the architecture's size, and CLIP's tokenizer."""

import torch

from concrete_jungle.plant.editors.sdxl import config, unet_on_meta, write_clip_tokenizer


def test_the_full_size_architecture_has_sdxl_s_parameter_counts():
    from diffusers import AutoencoderKL
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    unet = unet_on_meta()  # shapes only: no memory is allocated for 2.6 B weights
    assert all(p.device.type == "meta" for p in unet.parameters())
    assert count(unet) == 2_567_463_684  # SDXL's UNet: 2.57 B
    with torch.device("meta"):
        assert count(CLIPTextModel(CLIPTextConfig(**config("text_encoder")))) == 123_060_480  # CLIP ViT-L/14 text
        assert count(CLIPTextModelWithProjection(CLIPTextConfig(**config("text_encoder_2")))) == 694_659_840  # bigG
        assert count(AutoencoderKL.from_config(config("vae"))) == 83_653_863


def test_the_clip_tokenizer_built_from_open_clip_s_vocabulary_matches_open_clip(tmp_path):
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPTokenizer

    folder = write_clip_tokenizer(tmp_path / "tok")
    ours = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), pad_token="<|endoftext|>")
    reference = SimpleTokenizer()
    assert len(ours) == 49_408
    for text in ("A red fire hydrant next to a yellow taxi.", "two cats, sleeping; on a sofa!", "résumé naïve 42"):
        assert ours(text)["input_ids"] == [49406, *reference.encode(text), 49407]
