"""Forward + backward time and peak memory of CementLoss against open_clip's ClipLoss, and the time of every
loss in `concrete_jungle.loss.LOSSES` against ClipLoss.

Same 2N x D features (L2-normalised, fp32, CPU) for both; CementLoss with the adaptive margin and its
diagnostics on (output_dict=True), ClipLoss on the 2N pairs. Times: the two losses alternate within
each round (interleaved), medians over rounds. Peak memory: each (loss, N) runs once in a fresh
subprocess, peak resident memory during forward + backward minus the resident memory just before
(glibc returns these large blocks to the OS when freed, so RSS tracks live tensors).
Goal at N = 1024: time ratio <= 1.10 and peak-memory ratio <= 1.10.

    python benchmarks/loss_overhead.py --n 256,1024,4096 --rounds 15

``--every-loss``: each loss of LOSSES (defaults, diagnostics on) and Cement against ClipLoss on the same
N (1 + K) x D features and against ClipLoss on the N anchors alone (the two conventions), in two batches:
K = 1 with every negative picture (a planted ConcreteBatch) and K = 3 negative captions without pictures (the
FSC-CLIP / CE-CLIP data). A loss that reads extras gets random ones of a ViT-B/32's sizes, as training passes
them (`train.objective`): 49 patch features of each anchor picture, token features of each caption (8-20 real
tokens) at the batch's trimmed length (32 positions, `models.text_encoding.trim_tokens`; ``--full-context``: all
77, as a model whose text cannot be trimmed gives them), teacher features. All losses and ClipLoss take turns
within each round; medians. Goal at N = 1024: each ratio <= 1.3.

    python benchmarks/loss_overhead.py --every-loss --n 1024 --rounds 11

``--clock cpu`` times by the process's CPU seconds instead of the wall clock: on a machine that other jobs load,
with ``--threads 1``, it counts this process's work and not the time it waits for a core.
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
        loss = CementLoss("cement")
        return lambda i, t, c: loss(i, t, 100.0, c, output_dict=True)["contrastive_loss"].backward()
    loss = ClipLoss()
    return lambda i, t, c: loss(i, t, 100.0).backward()


EVERY_LOSS_BATCHES = {"K=1, pictures": (1, True), "K=3, captions only": (3, False)}
PATCHES, TOKENS = 49, 77  # ViT-B/32 at 224 px: 7 x 7 patches; open_clip's context length
LONGEST = 20  # the captions' real tokens: 8 to 20


def trimmed_positions() -> int:
    """The token positions training passes for captions of at most `LONGEST` tokens (`trimmed_length`'s rule)."""
    from concrete_jungle.models.text_encoding import rounded_length

    return rounded_length(LONGEST, TOKENS)


def make_batch(n: int, k: int, pictures: bool, d: int, needs: set[str], seed: int = 0,
               positions: int = TOKENS) -> dict:
    """Features, masks and the extras ``needs`` asks for, of one N (1 + K)-row batch (token features at
    ``positions``)."""
    g = torch.Generator().manual_seed(seed)
    rows = n * (1 + k)
    unit = lambda *shape: F.normalize(torch.randn(*shape, generator=g), dim=-1)  # noqa: E731
    batch = {"image": unit(rows, d).requires_grad_(), "text": unit(rows, d).requires_grad_(),
             "c": 1 + 4 * torch.rand(n, k, generator=g), "has_negative": torch.ones(n, k, dtype=torch.bool),
             "has_negative_image": torch.full((n, k), pictures), "extras": {}}
    extras = batch["extras"]
    if "image_tokens" in needs:
        # the anchors' patches alone, as training passes them (`train.objective.extras`: FSC-CLIP scores no other)
        extras["image_tokens"] = unit(n, PATCHES, d).requires_grad_()
    if "text_tokens" in needs:
        extras["text_tokens"] = unit(rows, positions, d).requires_grad_()
        lengths = torch.randint(8, LONGEST + 1, (rows, 1), generator=g)
        extras["text_token_mask"] = torch.arange(positions) < lengths
    for name in ("teacher_image_features", "teacher_text_features"):
        if name in needs:
            extras[name] = unit(rows, d)
    if "positive_text_features" in needs:  # CLIC's: P = 4 positives per picture, as its recipe
        extras["positive_text_features"] = unit(n, 3, d).requires_grad_()
        extras["has_positive"] = torch.ones(n, 3, dtype=torch.bool)
    return batch


def every_loss_steps():
    """name -> (needs, step(batch)) for ClipLoss, Cement and every loss of LOSSES."""
    from open_clip.loss import ClipLoss

    from concrete_jungle.loss import LOSSES, CementLoss

    def step_of(loss, needs=frozenset()):
        def step(b):
            extras = {name: value for name, value in b["extras"].items() if name in needs}
            out = loss(b["image"], b["text"], 100.0, b["c"], b["has_negative"], b["has_negative_image"],
                       output_dict=True, **extras)
            out["contrastive_loss"].backward()
        return step

    clip = ClipLoss()
    anchors = lambda b: b["c"].shape[0]  # noqa: E731
    steps = {"ClipLoss": (set(), lambda b: clip(b["image"], b["text"], 100.0).backward()),
             "ClipLoss on the anchors": (set(), lambda b: clip(b["image"][:anchors(b)], b["text"][:anchors(b)],
                                                                100.0).backward()),
             "cement": (set(), step_of(CementLoss("cement")))}
    for name, (loss_class, options_class) in LOSSES.items():
        loss = loss_class(options_class())
        steps[name] = (set(loss.needs), step_of(loss, loss.needs))
    return steps


def time_every_loss(n: int, d: int, rounds: int, clock, positions: int) -> None:
    print("| batch | loss | ClipLoss ms (N (1 + K) rows) | ClipLoss ms (N anchors) | loss ms | ratio (same rows) | "
          "ratio (anchors) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, (k, pictures) in EVERY_LOSS_BATCHES.items():
        steps = every_loss_steps()  # new losses per batch: a loss with a state keeps the K it first saw
        batch = make_batch(n, k, pictures, d, set().union(*(need for need, _ in steps.values())),
                           positions=positions)
        leaves = [batch["image"], batch["text"], *(t for t in batch["extras"].values() if t.requires_grad)]
        times = {name: [] for name in steps}
        order = list(steps.items())
        for r in range(rounds + 2):
            for name, (_, step) in (order if r % 2 else order[::-1]):
                for t in leaves:
                    t.grad = None
                t0 = clock()
                step(batch)
                if r >= 2:  # two warm-up rounds
                    times[name].append(clock() - t0)
        clip_t, anchors_t = (statistics.median(times[name]) * 1e3 for name in ("ClipLoss", "ClipLoss on the anchors"))
        for name in steps:
            if not name.startswith("ClipLoss"):
                loss_t = statistics.median(times[name]) * 1e3
                print(f"| {label} | {name} | {clip_t:.1f} | {anchors_t:.1f} | {loss_t:.1f} | {loss_t / clip_t:.3f} | "
                      f"{loss_t / anchors_t:.3f} |")


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
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: elapsed time; cpu: this process's CPU time (for a machine other jobs load)")
    ap.add_argument("--every-loss", action="store_true",
                    help="time every loss of LOSSES and Cement against ClipLoss (no memory)")
    ap.add_argument("--full-context", action="store_true",
                    help="--every-loss: token features at all 77 positions (default: the trimmed length training "
                         "passes)")
    ap.add_argument("--memory-of", nargs=2, metavar=("LOSS", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_of:
        print(json.dumps(measure_memory(args.memory_of[0], int(args.memory_of[1]), args.d)))
        return
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    if args.every_loss:
        positions = TOKENS if args.full_context else trimmed_positions()
        print(f"CPU fp32, D = {args.d}, {args.threads} threads, {args.rounds} interleaved rounds, {args.clock} "
              f"clock, token features at {positions} positions; torch {torch.__version__}\n")
        for n in map(int, args.n.split(",")):
            print(f"N = {n}")
            time_every_loss(n, args.d, args.rounds, clock, positions)
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
                t0 = clock()
                step(*inputs)
                if r >= 2:  # two warm-up rounds
                    times[name].append(clock() - t0)
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
