"""Time per training step of our trainer against open_clip's own (`open_clip_train.train.train_one_epoch`).

Same model architecture and initial weights, same 2N images and 2N texts per step, fp32 on the CPU.
Reference: open_clip_train's epoch loop with ClipLoss over the 2N pairs (its scheduler, AdamW, grad-clip).
Ours: `concrete_jungle.train.objective.training_step` with CementLoss (adaptive margin, diagnostics on). Each round
runs K steps of one, then K steps of the other (alternating order); medians of per-step time.
Goal: ratio <= 1.10. On CUDA the batches are placed on the GPU before timing (as a prefetching loader leaves
them), so a step is the model's work, not the host-to-device copy (`--from-host` keeps them in pinned host
memory and times the copy too), and both trainers get open_clip_train's TF32 and cuDNN settings;
`--compile` runs both through torch.compile (open_clip_train's --torchcompile). Texts are random tokens filling
the whole context unless `--captions` names real captions (e.g. the SugarCrepe positives: COCO captions), which
ours encodes at each batch's longest caption (`models/text_encoding.py`; `--no-trim-text`: at the full context, as
open_clip_train does). Goal with captions: ratio <= 0.80.

    python benchmarks/train_step.py --model cj-tiny --n 64 --steps 4 --rounds 9
    python benchmarks/train_step.py --model ViT-B-32 --n 32 --steps 2 --rounds 5 --captions data/sugarcrepe
    python benchmarks/train_step.py --model ViT-B-32 --n 1024 --device cuda --precision amp_bf16   # GPU, MFU
    bash benchmarks/gpu_check.sh   # the GPU measurements as one command on an H200 (see that file)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from types import SimpleNamespace

import open_clip
import torch
from open_clip.loss import ClipLoss
from open_clip_train.scheduler import cosine_lr
from open_clip_train.train import train_one_epoch

from concrete_jungle.loss import CementLoss
from concrete_jungle.models import factory  # noqa: F401  (registers cj-tiny)
from concrete_jungle.models.text_encoding import TrimmedTextCLIP, trim_tokens, trimmable
from concrete_jungle.sources import anchor_caption, read_samples
from concrete_jungle.train.loop import param_groups, use_open_clip_cuda_settings
from concrete_jungle.train.objective import StepContext, training_step


class Loader(list):
    """The few attributes open_clip_train reads from its dataloader."""

    @property
    def num_batches(self):
        return len(self)

    @property
    def num_samples(self):
        return sum(len(b[0]) for b in self)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cj-tiny")
    ap.add_argument("--n", type=int, default=64, help="anchors per step (2N images and texts)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "amp_bf16"], help="amp_bf16: bf16 autocast (CUDA)")
    ap.add_argument("--gflops-per-pair", type=float, default=8.82 + 5.96,
                    help="forward GFLOPs of one image + one 77-token text (ViT-B-32: 8.82 + 5.96) for MFU")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the accelerator's dense bf16 peak (H100/H200)")
    ap.add_argument("--compile", action="store_true", help="torch.compile both models (warm-up includes compiling)")
    ap.add_argument("--captions", nargs="+", help="caption files for the texts (any format `keywords` reads)")
    ap.add_argument("--no-trim-text", action="store_true", help="ours at the full context too")
    ap.add_argument("--from-host", action="store_true",
                    help="CUDA: batches stay in pinned host memory and each step copies them over, as from a loader")
    args = ap.parse_args()
    device, autocast = args.device, args.precision == "amp_bf16"
    if device.startswith("cuda"):
        use_open_clip_cuda_settings()  # as our train() and open_clip_train's main: the same for both trainers

    size = open_clip.get_model_config(args.model)["vision_cfg"]["image_size"]
    g = torch.Generator().manual_seed(0)
    if args.captions:  # real captions, each step 2N of them drawn with the seed
        import random

        captions = [anchor_caption(x.captions) for x in read_samples(args.captions) if x.error is None]
        rng, tokenizer = random.Random(0), open_clip.get_tokenizer(args.model)
        texts = [tokenizer(rng.sample(captions, 2 * args.n)) for _ in range(args.steps)]
    else:
        texts = [torch.randint(1, 49407, (2 * args.n, 77), generator=g) for _ in range(args.steps)]
    batches = [(torch.randn(2 * args.n, 3, size, size, generator=g), t) for t in texts]
    if device.startswith("cuda"):
        place = (lambda t: t.pin_memory()) if args.from_host else (lambda t: t.to(device))
        batches = [(place(images), place(texts)) for images, texts in batches]
    c = 1 + 4 * torch.rand(args.n, generator=g)
    has_negative = torch.ones(args.n, dtype=torch.bool)

    torch.manual_seed(0)
    ours = open_clip.create_model(args.model).to(device)
    theirs = open_clip.create_model(args.model, output_dict=True).to(device)
    theirs.load_state_dict(ours.state_dict())
    opt_ours = torch.optim.AdamW(param_groups(ours, 0.1), lr=1e-5, betas=(0.9, 0.98), eps=1e-6)
    opt_theirs = torch.optim.AdamW(param_groups(theirs, 0.1), lr=1e-5, betas=(0.9, 0.98), eps=1e-6)
    scheduler = cosine_lr(opt_theirs, 1e-5, 2, 10_000)
    trim = not args.no_trim_text and trimmable(ours)
    forward_ours = TrimmedTextCLIP(ours) if trim else ours
    forward_ours, forward_theirs = (torch.compile(forward_ours), torch.compile(theirs)) if args.compile else (
        forward_ours, theirs)
    cement = CementLoss("cement")
    step_ours = StepContext(forward_ours, ours, cement, opt_ours, device, 1.0, autocast, trim_text=trim)
    targs = SimpleNamespace(accum_freq=1, batch_size=2 * args.n, device=device, distill=False, grad_clip_norm=1.0,
                            horovod=False, log_every_n_steps=10**9, precision=args.precision, skip_scheduler=False,
                            wandb=False, world_size=1, rank=0)
    data = {"train": SimpleNamespace(dataloader=Loader(batches), set_epoch=lambda e: None)}

    def run_ours():
        for images, texts in batches:
            batch = (images[: args.n], images[args.n:, None], texts[: args.n], texts[args.n:, None], c[:, None],
                     has_negative[:, None], has_negative[:, None],
                     torch.zeros_like(has_negative)[:, None])
            training_step(step_ours, batch, 1e-5)
        sync()

    def run_theirs():
        train_one_epoch(forward_theirs, data, ClipLoss(), 0, opt_theirs, None, scheduler, None, targs)
        sync()

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    times = {"ours": [], "open_clip_train": []}
    run_ours(), run_theirs()  # warm-up
    for r in range(args.rounds):
        order = [("ours", run_ours), ("open_clip_train", run_theirs)]
        for name, fn in (order if r % 2 else order[::-1]):
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) / args.steps)
    o, t = statistics.median(times["ours"]), statistics.median(times["open_clip_train"])
    params = sum(p.numel() for p in ours.parameters()) / 1e6
    where = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU {torch.get_num_threads()} threads"
    setting = [args.precision] + ["torch.compile"] * args.compile
    setting += [f"captions from {', '.join(args.captions)}" if args.captions else "random 77-token texts"]
    if trim:
        lengths = [trim_tokens(ours, t).shape[1] for _, t in batches]
        setting += [f"ours at the batch's caption length ({min(lengths)}-{max(lengths)} tokens)"]
    setting += ["batches copied from pinned host memory"] * (args.from_host and device.startswith("cuda"))
    print(f"model {args.model} ({params:.1f} M parameters), N = {args.n} anchors (2N = {2 * args.n} pairs), "
          f"{', '.join(setting)}, {where}, torch {torch.__version__}, {args.steps} steps x {args.rounds} rounds "
          "(medians)\n")
    print("| trainer | ms per step |\n| --- | --- |")
    print(f"| open_clip_train (ClipLoss) | {1e3 * t:.1f} |")
    print(f"| concrete-jungle (CementLoss, diagnostics) | {1e3 * o:.1f} |")
    print(f"ratio ours / open_clip_train: {o / t:.3f} (goal <= 1.10; with captions, <= 0.80)")
    pairs_per_s = 2 * args.n / o  # 2N images and 2N texts per step
    mfu = pairs_per_s * 3 * args.gflops_per_pair * 1e9 / (args.peak_tflops * 1e12)
    print(f"ours: {pairs_per_s:.0f} image-text pairs/s ({args.n / o:.0f} anchors/s)")
    if device.startswith("cuda"):  # the FLOPs per pair are ViT-B-32's unless --gflops-per-pair says otherwise
        print(f"model FLOPs utilisation {100 * mfu:.1f}% of {args.peak_tflops:g} TFLOP/s (forward + backward = 3x)")
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB (both models, their optimizers "
              "and the batches included)")
    assert math.isfinite(o) and math.isfinite(t)


if __name__ == "__main__":
    main()
