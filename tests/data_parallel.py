"""Two gloo processes on this machine computing losses as data-parallel ranks, and the check that what they give
is what one process gives on the global batch (open_clip's ClipLoss semantics, as DDP would combine them).

A test module gives `run_ranks` a top-level function (spawned processes import it by name) that yields, for one
rank, ``(key, (losses, grads))`` per case: the losses of its steps and its parameters' gradients. Each rank's
losses are gathered and its gradients summed over ranks (DDP's average times the world size), and saved per key.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, out_dir: str, cases) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    for key, (losses, grads) in cases(rank):
        gathered = [torch.zeros_like(losses) for _ in range(WORLD)]
        dist.all_gather(gathered, losses)
        for g in grads.values():
            dist.all_reduce(g)  # summed here; DDP's average is this divided by the world size
        torch.save({"losses": torch.stack(gathered), "grads": grads}, os.path.join(out_dir, f"{key}-rank{rank}.pt"))
    dist.destroy_process_group()


def run_ranks(out: Path, cases) -> Path:
    """One run of `WORLD` processes, each yielding ``cases(rank)``; their results under ``out``."""
    torch.multiprocessing.spawn(_rank, args=(_free_port(), str(out), cases), nprocs=WORLD, join=True)
    return out


def assert_ranks_match(out: Path, key: str, ref_losses: torch.Tensor, ref_grads: dict, local_loss: bool,
                       gather_with_grad: bool, loss_tol: dict, grad_tol: dict) -> None:
    """Every rank's results of case ``key`` against one process's ``ref_losses`` and ``ref_grads`` on the global
    batch."""
    for rank in range(WORLD):
        result = torch.load(out / f"{key}-rank{rank}.pt", weights_only=True)
        if local_loss:  # each rank's loss is its share; DDP averages them
            torch.testing.assert_close(result["losses"].mean(dim=0), ref_losses, **loss_tol)
        else:  # every rank computes the whole global loss
            torch.testing.assert_close(result["losses"], ref_losses.expand(WORLD, *ref_losses.shape), **loss_tol)
        for param, g in result["grads"].items():
            # with gather_with_grad the gradient flows back through the gather and DDP's average is exact;
            # without it each rank reaches only its own features, and the sum over ranks is the global gradient
            torch.testing.assert_close(g / WORLD if gather_with_grad else g, ref_grads[param], **grad_tol)
