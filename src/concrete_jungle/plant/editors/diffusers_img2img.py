"""Image-to-image editing with diffusers: SDXL-Turbo by default (docs/method.md §3).

``AutoPipelineForImage2Image`` loads any img2img-capable model id or local path. On CUDA the UNet runs
in fp16 while the SDXL VAE, which overflows in fp16, is decoded in fp32 (the pipeline's own
``force_upcast``; or pass ``vae=`` a fp16-fixed VAE such as ``madebyollin/sdxl-vae-fp16-fix``).
Guidance is off (SDXL-Turbo is distilled without it), one generator per sample makes each edit
reproducible from its seed, and ``compile=True`` wraps the UNet in ``torch.compile``.
"""

from __future__ import annotations

import torch
from PIL import Image

from ..hub import check_model_available


def check_schedule(strength: float, steps: int) -> None:
    if not 0 < strength <= 1:
        raise ValueError(f"strength must be in (0, 1], got {strength}")
    if int(steps * strength) < 1:
        raise ValueError(f"steps x strength = {steps} x {strength} runs no denoising step "
                         "(int(steps * strength) must be >= 1); raise --steps or --strength")


class DiffusersEditor:
    reuses_anchor = False

    def __init__(
        self,
        model: str = "stabilityai/sdxl-turbo",
        strength: float = 0.75,
        steps: int = 4,
        guidance_scale: float = 0.0,
        size: int = 512,
        batch_size: int = 8,
        device: str | None = None,
        dtype: str = "auto",
        vae: str | None = None,
        compile: bool = False,
    ):
        check_schedule(strength, steps)
        from diffusers import AutoencoderKL, AutoPipelineForImage2Image

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = {"auto": torch.float16 if self.device.startswith("cuda") else torch.float32,
                       "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
        extra = {"vae": AutoencoderKL.from_pretrained(vae, torch_dtype=torch_dtype)} if vae else {}
        variant = {"variant": "fp16"} if torch_dtype == torch.float16 and model == "stabilityai/sdxl-turbo" else {}
        self.pipe = AutoPipelineForImage2Image.from_pretrained(model, torch_dtype=torch_dtype, **variant, **extra)
        self.pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)
        if compile:
            self.pipe.unet = torch.compile(self.pipe.unet, mode="max-autotune", fullgraph=True)
        self.name = f"diffusers:{model}:s{strength}:n{steps}"
        self.strength, self.steps, self.guidance_scale = strength, steps, guidance_scale
        self.size, self.batch_size = size, batch_size

    @classmethod
    def check_options(cls, model: str = "stabilityai/sdxl-turbo", strength: float = 0.75, steps: int = 4,
                      vae: str | None = None, **_) -> None:
        """The schedule runs a step and the model (and VAE) can be had, before a run writes anything; nothing is
        loaded (the other options need no check)."""
        check_schedule(strength, steps)
        check_model_available(model, "--editor-model", "model_index.json")
        if vae:
            check_model_available(vae, "--vae", "config.json")

    @torch.inference_mode()
    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]:
        out: list[Image.Image] = []
        for i in range(0, len(images), self.batch_size):
            chunk = [im.convert("RGB").resize((self.size, self.size), Image.BICUBIC)
                     for im in images[i: i + self.batch_size]]
            generators = [torch.Generator(self.device).manual_seed(s) for s in seeds[i: i + self.batch_size]]
            result = self.pipe(
                prompt=prompts[i: i + self.batch_size], image=chunk, strength=self.strength,
                num_inference_steps=self.steps, guidance_scale=self.guidance_scale, generator=generators,
            )
            out.extend(result.images)
        return out
