"""SDXL-Turbo's architecture at full size, from configs kept in this repository, with random weights.

Speed does not depend on weight values, so a pipeline built here measures what the real `stabilityai/sdxl-turbo`
costs without downloading it: the UNet (2.57 B parameters), the VAE, both CLIP text encoders (ViT-L/14 and
OpenCLIP bigG text towers) and SDXL-Turbo's Euler-ancestral scheduler with trailing timesteps. The configs are
in ``model_configs/sdxl-turbo/``; the tokenizers are CLIP's byte-pair vocabulary, built from the file that ships
in open_clip's wheel. `build_sdxl_turbo` saves the pipeline with ``save_pretrained``, so the `diffusers` editor
loads it by path exactly as it loads the real model.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

CONFIG_DIR = Path(__file__).parents[2] / "model_configs" / "sdxl-turbo"


def config(name: str) -> dict:
    """One component's config (``unet``, ``vae``, ``text_encoder``, ``text_encoder_2``, ``scheduler``)."""
    return {k: v for k, v in json.loads((CONFIG_DIR / f"{name}.json").read_text()).items()
            if k not in ("_class_name", "architectures")}


def unet_on_meta():
    """The full-size UNet with no memory behind its weights (shapes only): for counting parameters."""
    import torch
    from diffusers import UNet2DConditionModel

    with torch.device("meta"):
        return UNet2DConditionModel.from_config(config("unet"))


def write_clip_tokenizer(path: Path) -> Path:
    """CLIP's tokenizer files (vocab.json, merges.txt; 49,408 tokens), made from open_clip's BPE file the way
    CLIP's own tokenizer makes its vocabulary: the 256 byte characters, the same with ``</w>``, the merges, and
    the start and end tokens."""
    from open_clip.tokenizer import bytes_to_unicode, default_bpe

    with gzip.open(default_bpe(), "rt", encoding="utf-8") as f:
        merges = f.read().split("\n")[1: 49152 - 256 - 2 + 1]
    byte_chars = list(bytes_to_unicode().values())
    words = byte_chars + [c + "</w>" for c in byte_chars] + ["".join(m.split()) for m in merges]
    words += ["<|startoftext|>", "<|endoftext|>"]
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.json").write_text(json.dumps({w: i for i, w in enumerate(words)}))
    (path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return path


def build_sdxl_turbo(path: str | Path, seed: int = 0, dtype: str = "float16", device: str = "cpu") -> Path:
    """The SDXL-Turbo image-to-image pipeline at full size with random weights, saved to ``path`` (about 7 GB in
    fp16); build it on the machine that uses it (``device="cuda"``: initialised on the GPU, in seconds)."""
    import torch
    from diffusers import (
        AutoencoderKL,
        EulerAncestralDiscreteScheduler,
        StableDiffusionXLImg2ImgPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    path = Path(path)
    torch.manual_seed(seed)
    tokenizer_dir = write_clip_tokenizer(path / "_clip_tokenizer")
    tokenizer = CLIPTokenizer(str(tokenizer_dir / "vocab.json"), str(tokenizer_dir / "merges.txt"),
                              pad_token="<|endoftext|>", model_max_length=77)
    tokenizer_2 = CLIPTokenizer(str(tokenizer_dir / "vocab.json"), str(tokenizer_dir / "merges.txt"), pad_token="!",
                                model_max_length=77)  # SDXL's second tokenizer pads with "!"
    with torch.device(device):
        pipe = StableDiffusionXLImg2ImgPipeline(
            vae=AutoencoderKL.from_config(config("vae")),
            text_encoder=CLIPTextModel(CLIPTextConfig(**config("text_encoder"))),
            text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig(**config("text_encoder_2"))),
            tokenizer=tokenizer, tokenizer_2=tokenizer_2, unet=UNet2DConditionModel.from_config(config("unet")),
            scheduler=EulerAncestralDiscreteScheduler.from_config(config("scheduler")),
        )
    pipe.to(dtype=getattr(torch, dtype)).save_pretrained(path)
    return path
