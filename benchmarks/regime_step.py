"""Time per training step of each training regime (`train.regime`): full fine-tuning, LoRA adapters, frozen parts.

The same model and initial weights, the same 2N images and 2N texts per step (random pixels, random 77-token
texts), our `training_step` with CementLoss, fp32 on the CPU (bf16 autocast with ``--device cuda --precision
amp_bf16``). Each round runs K steps of every regime, in an order that turns each round; medians of per-step time.
The trained parameters and the optimizer's state (Adam's two moments per trained weight) are counted too, and the
process's CPU time per step beside the wall time: on a machine shared with other jobs the wall time counts their
turns too, the CPU time far less (with one thread: several threads spin while they wait for each other, and a
shared machine makes them wait).

    python benchmarks/regime_step.py --model cj-tiny --n 64 --steps 4 --rounds 5 --threads 1
    python benchmarks/regime_step.py --model ViT-B-32 --n 16 --steps 2 --rounds 3 --threads 1
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import open_clip
import torch

from concrete_jungle.loss import CementLoss
from concrete_jungle.models import factory  # noqa: F401  (registers cj-tiny)
from concrete_jungle.train.config import FreezeConfig, LoraConfig, RegimeConfig
from concrete_jungle.train.loop import param_groups, use_open_clip_cuda_settings
from concrete_jungle.train.objective import StepContext, training_step
from concrete_jungle.train.regime import Regime

REGIMES = {
    "full fine-tuning": RegimeConfig(),
    "LoRA rank 8, attn + mlp, both towers": RegimeConfig(lora=LoraConfig(rank=8)),
    "LoRA rank 8, attn + mlp, text tower": RegimeConfig(lora=LoraConfig(rank=8, towers=["text"])),
    "frozen image tower": RegimeConfig(freeze=FreezeConfig(image=True)),
    "frozen first half of each tower's blocks": None,  # set from the model's depth in main
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cj-tiny")
    ap.add_argument("--n", type=int, default=64, help="anchors per step (2N images and texts)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "amp_bf16"])
    ap.add_argument("--threads", type=int, help="torch CPU threads (1: no thread waits on another: CPU time is work)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device, autocast = args.device, args.precision == "amp_bf16"
    if device.startswith("cuda"):
        use_open_clip_cuda_settings()

    cfg = open_clip.get_model_config(args.model)
    size = cfg["vision_cfg"]["image_size"]
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(2 * args.n, 3, size, size, generator=g).to(device),
                torch.randint(1, 49407, (2 * args.n, 77), generator=g).to(device)) for _ in range(args.steps)]
    c = 1 + 4 * torch.rand(args.n, generator=g)
    has_negative = torch.ones(args.n, dtype=torch.bool)
    half = FreezeConfig(image_blocks=cfg["vision_cfg"]["layers"] // 2, text_blocks=cfg["text_cfg"]["layers"] // 2)
    regimes = {k: v or RegimeConfig(freeze=half) for k, v in REGIMES.items()}

    torch.manual_seed(0)
    base = open_clip.create_model(args.model).to(device)
    runs = {}
    for name, regime in regimes.items():
        model = copy.deepcopy(base).train()
        Regime(model, regime)
        optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-5, betas=(0.9, 0.98), eps=1e-6)
        runs[name] = (model, optimizer)
    cement = CementLoss("cement")

    def run(name: str) -> tuple[float, float]:
        model, optimizer = runs[name]
        step = StepContext(model, model, cement, optimizer, device, 1.0, autocast)
        t0, cpu0 = time.perf_counter(), time.process_time()
        for images, texts in batches:
            batch = (images[: args.n], images[args.n:, None], texts[: args.n], texts[args.n:, None], c[:, None],
                     has_negative[:, None], has_negative[:, None],
                     torch.zeros_like(has_negative)[:, None])
            training_step(step, batch, 1e-5)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / args.steps, (time.process_time() - cpu0) / args.steps

    for name in runs:  # warm-up
        run(name)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            times[name].append(run(name))
    where = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU {torch.get_num_threads()} threads"
    total = sum(p.numel() for p in base.parameters())
    print(f"model {args.model} ({total / 1e6:.1f} M parameters, random init), N = {args.n} anchors (2N = "
          f"{2 * args.n} pairs), {args.precision}, {where}, torch {torch.__version__}, {args.steps} steps x "
          f"{args.rounds} rounds (medians)\n")
    print("| regime | ms per step | vs full | CPU ms per step | vs full | trained parameters | optimizer state (MiB) "
          "|\n| --- | --- | --- | --- | --- | --- | --- |")
    full, full_cpu = (statistics.median(t[i] for t in times["full fine-tuning"]) for i in (0, 1))
    for name, (model, optimizer) in runs.items():
        ms, cpu = (statistics.median(t[i] for t in times[name]) for i in (0, 1))
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        state = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
                    if torch.is_tensor(v))
        print(f"| {name} | {1e3 * ms:.1f} | {ms / full:.2f} | {1e3 * cpu:.1f} | {cpu / full_cpu:.2f} | "
              f"{trained / 1e6:.3g} M | {state / 2**20:.1f} |")


if __name__ == "__main__":
    main()
