"""The process a training run lives in: its rank under torchrun, and the signals that ask it to stop."""

from __future__ import annotations

import os

import torch


class StopSignals:
    """While active, Ctrl-C (SIGINT) and SIGTERM (a cluster pre-empting the job) ask the loop to stop after the
    step in progress, so it can save a checkpoint first; a second signal acts as usual (stops at once). Where
    handlers cannot be installed (a thread other than the main one), signals keep their usual effect."""

    def __init__(self):
        self.received: str | None = None
        self.previous: dict = {}

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, signum, frame):
        import signal

        self.received = signal.Signals(signum).name
        signal.signal(signum, self.previous[signum])  # the next one is not caught

    def __exit__(self, *exc):
        import signal

        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def requested(self, world: int, device: str) -> bool:
        """Whether any rank received a signal: all ranks stop after the same step."""
        if world == 1:
            return self.received is not None
        import torch.distributed as dist

        flag = torch.tensor([self.received is not None], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def distributed() -> tuple[int, int, int]:
    """(rank, world size, local rank), initialising the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world == 1:
        return 0, 1, 0
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", 0))
