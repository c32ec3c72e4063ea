"""Forward + backward time and peak memory of CementLoss against open_clip's ClipLoss.

Same 2N x D features (L2-normalised, fp32, CPU) for both; CementLoss with the adaptive margin and its
diagnostics on (output_dict=True), ClipLoss on the 2N pairs. Times: the two losses alternate within
each round (interleaved), medians over rounds. Peak memory: each (loss, N) runs once in a fresh
subprocess, peak resident memory during forward + backward minus the resident memory just before
(glibc returns these large blocks to the OS when freed, so RSS tracks live tensors).
Goal at N = 1024: time ratio <= 1.10 and peak-memory ratio <= 1.10.

    python benchmarks/loss_overhead.py --n 256,1024,4096 --rounds 15
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def make_inputs(n: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    image = F.normalize(torch.randn(2 * n, d, generator=g), dim=1).requires_grad_()
    text = F.normalize(torch.randn(2 * n, d, generator=g), dim=1).requires_grad_()
    c = 1 + 4 * torch.rand(n, generator=g)
    return image, text, c


def make_step(name: str):
    from open_clip.loss import ClipLoss

    from concrete_jungle.loss import CementLoss

    if name == "cement":
        loss = CementLoss("adaptive")
        return lambda i, t, c: loss(i, t, 100.0, c, output_dict=True)["contrastive_loss"].backward()
    loss = ClipLoss()
    return lambda i, t, c: loss(i, t, 100.0).backward()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def measure_memory(name: str, n: int, d: int) -> int:
    """Run in a fresh process: peak RSS growth of one forward + backward."""
    step = make_step(name)
    small = make_inputs(8, d)
    step(*small)  # load kernels and lazy state at a tiny size
    image, text, c = make_inputs(n, d)
    before = rss_bytes()
    step(image, text, c)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return peak - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="256,1024,4096")
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--memory-of", nargs=2, metavar=("LOSS", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_of:
        print(json.dumps(measure_memory(args.memory_of[0], int(args.memory_of[1]), args.d)))
        return

    steps = {name: make_step(name) for name in ("cement", "clip")}
    print(f"CPU fp32, D = {args.d}, {args.threads} threads, {args.rounds} interleaved rounds; "
          f"torch {torch.__version__}\n")
    print("| N | ClipLoss ms | CementLoss ms | time ratio | ClipLoss peak MiB | CementLoss peak MiB | memory ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in map(int, args.n.split(",")):
        inputs = make_inputs(n, args.d)
        times = {name: [] for name in steps}
        for r in range(args.rounds + 2):
            for name, step in (steps.items() if r % 2 else reversed(steps.items())):
                for t in inputs[:2]:
                    t.grad = None
                t0 = time.perf_counter()
                step(*inputs)
                if r >= 2:  # two warm-up rounds
                    times[name].append(time.perf_counter() - t0)
        memory = {}
        for name in steps:
            out = subprocess.run([sys.executable, __file__, "--memory-of", name, str(n), "--d", str(args.d),
                                  "--threads", str(args.threads)], capture_output=True, text=True, check=True)
            memory[name] = json.loads(out.stdout) / 2**20
        clip_t, cement_t = (statistics.median(times[k]) * 1e3 for k in ("clip", "cement"))
        print(f"| {n} | {clip_t:.1f} | {cement_t:.1f} | {cement_t / clip_t:.3f} | {memory['clip']:.1f} | "
              f"{memory['cement']:.1f} | {memory['cement'] / memory['clip']:.3f} |")


if __name__ == "__main__":
    main()
