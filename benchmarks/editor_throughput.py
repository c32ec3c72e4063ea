"""Edited pictures/s of the `diffusers` editor with SDXL-Turbo's full-size architecture (random weights), and the
time to edit COCO Karpathy train (113,287 pictures) at that rate.

The pipeline is built from the configs in `src/concrete_jungle/model_configs/sdxl-turbo/`
(`concrete_jungle.plant.editors.sdxl`)
and loaded by path through the editor, exactly as `plant --editor diffusers --editor-model PATH` loads it: 512 px,
strength 0.75, 4 steps (3 denoising steps), guidance 0, fp16 on CUDA with the VAE upcast. Each batch size edits
``--pictures`` pictures after one warm-up batch; ``--compile`` repeats it with the UNet under torch.compile.
Goal: COCO Karpathy train in <= 3 h on one H200 (>= 10.5 pictures/s).

    python benchmarks/editor_throughput.py --device cuda --batch-sizes 1,4,8,16 --pictures 64 [--compile] \
        [--write-rate rates.yaml]   # then: concrete-jungle plant ... --estimate --throughput rates.yaml
    python benchmarks/editor_throughput.py --tiny --device cpu --batch-sizes 1,2 --pictures 4   # a dry run
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

COCO_TRAIN = 113_287


def main() -> None:
    from concrete_jungle.plant.editors import make_editor

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--pictures", type=int, default=64, help="pictures edited per batch size")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--compile", action="store_true", help="also measure with the UNet compiled")
    ap.add_argument("--tiny", action="store_true", help="the tiny SDXL of the tests instead (a dry run)")
    ap.add_argument("--model-dir", help="a pipeline already built here (default: build one in a temporary folder)")
    ap.add_argument("--write-rate", metavar="FILE", help="put the fastest rate measured into this throughput table "
                    "as the edit stage's (the other stages kept), for `plant --estimate --throughput FILE`")
    args = ap.parse_args()
    dtype = "float16" if args.device.startswith("cuda") else "float32"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.model_dir) if args.model_dir else Path(tmp) / "sdxl"
        t0 = time.perf_counter()
        if not (path / "model_index.json").is_file():
            if args.tiny:
                from concrete_jungle.models.tiny import build_tiny_sdxl_img2img

                build_tiny_sdxl_img2img(path)
            else:
                from concrete_jungle.plant.editors.sdxl import build_sdxl_turbo

                build_sdxl_turbo(path, dtype=dtype, device=args.device)
        print(f"pipeline: {'tiny' if args.tiny else 'SDXL-Turbo full size'}, built in {time.perf_counter() - t0:.0f} s;"
              f" {args.device}, {dtype}, {args.size} px, strength 0.75, 4 steps, torch {torch.__version__}")
        rng = np.random.default_rng(0)
        anchors = [Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)) for _ in range(args.pictures)]
        prompts = ["A photo of a red car parked next to a blue bench."] * args.pictures
        print("| UNet | batch | pictures/s | COCO Karpathy train (113,287) |\n| --- | --- | --- | --- |")
        best = (0.0, "")
        for compiled in ([False, True] if args.compile else [False]):
            editor = make_editor("diffusers", model=str(path), size=args.size, device=args.device, dtype=dtype,
                                 compile=compiled)  # loaded once; the batch size is the editor's own setting
            for b in (int(x) for x in args.batch_sizes.split(",")):
                editor.batch_size = b
                editor.edit(anchors[:b], prompts[:b], list(range(b)))  # warm-up (and compilation)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                editor.edit(anchors, prompts, list(range(args.pictures)))
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                rate = args.pictures / (time.perf_counter() - t0)
                unet = "compiled" if compiled else "eager"
                print(f"| {unet} | {b} | {rate:.2f} | {COCO_TRAIN / rate / 3600:.2f} h |", flush=True)
                best = max(best, (rate, f"{unet} UNet, batch {b}"))
            del editor
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    if args.write_rate:
        write_rate(args, *best)


def write_rate(args, rate: float, setting: str) -> None:
    """The fastest rate, as the edit stage of the throughput table ``--write-rate`` (`estimate.record_rate`)."""
    from concrete_jungle.plant.estimate import StageRate, record_rate

    hardware = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else f"CPU ({torch.get_num_threads()} "
    hardware = hardware if args.device.startswith("cuda") else hardware + "threads)"
    pipeline = "tiny SDXL (a dry run)" if args.tiny else "SDXL-Turbo"
    source = (f"benchmarks/editor_throughput.py: {pipeline} img2img at {args.size} px, 4 steps, {setting}, "
              f"{args.pictures} pictures")
    record_rate(args.write_rate, "edit", StageRate(rate, gpus=1 if args.device.startswith("cuda") else 0,
                                                   hardware=hardware, source=source))
    print(f"written: the edit stage's rate {rate:.2f} pictures/s into {args.write_rate}")


if __name__ == "__main__":
    main()
