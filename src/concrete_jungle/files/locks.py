"""One job per output: a lock file beside what a command writes, so that a second job on the same output is refused
at once (naming the first job) instead of interleaving its writes with the first's.

The lock is created with ``O_EXCL`` and holds the job's pid, host, command and start time. A lock whose process is
gone (same host, pid not running) is stale: the next job takes it over and says so. A lock of another host cannot
be checked from here: it is refused with the file to remove if that job is known to be gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from ..errors import JobError


class LockedError(JobError):
    """Another job holds the output."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user
        return True
    return True


def _describe(holder: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
    return f"{holder.get('command', '?')} (pid {holder.get('pid')} on {holder.get('host')}, since {started})"


def _acquire(lock: Path, what: str, command: str) -> dict:
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "started": time.time()}
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):  # a stale lock is taken over; a race with another taker is lost cleanly
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            try:
                holder = json.loads(lock.read_text())
            except (OSError, ValueError):
                holder = {}
            if not holder:  # written by a job that died between creating and filling it
                if time.time() - lock.stat().st_mtime < 5:
                    time.sleep(0.2)
                    continue
            elif holder.get("host") != me["host"] or _alive(int(holder.get("pid", -1))):
                raise LockedError(f"{what} is in use by another job: {_describe(holder)}. Wait for it to finish, "
                                  f"or, if it is gone, remove {lock}") from None
            print(f"note: {what}: taking over the lock of a job that is gone: {_describe(holder)}", file=sys.stderr)
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        return me
    raise LockedError(f"{what}: could not take the lock {lock}; another job is taking it at the same time")


@contextlib.contextmanager
def locked(lock: str | Path, what: str, command: str):
    """Hold ``lock`` (a file path) while the block runs; ``what`` names the output in messages."""
    lock = Path(lock)
    me = _acquire(lock, what, command)
    try:
        yield
    finally:
        try:
            if json.loads(lock.read_text()).get("pid") == me["pid"]:
                lock.unlink()
        except (OSError, ValueError):
            pass
