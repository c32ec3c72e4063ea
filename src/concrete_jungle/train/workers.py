"""How many DataLoader worker processes a run may start: at most the CPUs this process may use, since more only
contend for the same CPUs (and torch warns at every loader it starts)."""

from __future__ import annotations

import os
import sys


def usable_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's share, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_workers() -> int:
    return min(4, usable_cpus())


def capped_workers(workers: int, setting: str, note: bool = True) -> int:
    """``workers`` DataLoader processes, at most `usable_cpus`: more only contend for the same CPUs (and torch
    warns at every loader it starts); the cap is said once, in a line naming ``setting``."""
    cpus = usable_cpus()
    if workers <= cpus:
        return workers
    if note:
        print(f"note: {setting} {workers} is more than the {cpus} CPU(s) this process may use: {cpus} worker "
              "process(es)", file=sys.stderr)
    return cpus
