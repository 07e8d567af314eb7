"""Processes and time: every child ends with us, and every wait is bounded.

``Deadline`` caps each wait of the browser flow; ``reap`` ends what a server or a browser left
behind; ``die_with_parent`` has a child get SIGTERM should this process be killed outright (no
teardown runs then); ``terminate_as_interrupt`` turns a SIGTERM into KeyboardInterrupt so teardowns
still run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any


class BudgetSpent(Exception):
    """A ``Deadline`` ran out."""


class Deadline:
    """A point in time every wait is capped by."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def ms(self, cap: float | None = None) -> float:
        """Milliseconds left (at most ``cap`` seconds) for a Playwright timeout; raises when none are."""
        left = self.left()
        if left <= 0:
            raise BudgetSpent(f"the {self.seconds:.0f} s allowed ran out")
        return 1000 * (left if cap is None else min(left, cap))

def descendants(pid: int) -> list[Any]:
    """psutil handles on every process below ``pid`` (empty without psutil, or when it is gone)."""
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:
        return []


def reap(processes: list[Any], grace: float = 5.0) -> list[str]:
    """Terminate, then kill, those of ``processes`` still alive; returns what had to be ended."""
    try:
        import psutil
    except ImportError:
        return []
    alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    ended = []
    for p in alive:
        with contextlib.suppress(psutil.Error):
            ended.append(f"{p.pid} {' '.join(p.cmdline()[:3])}")
            p.terminate()
    _, alive = psutil.wait_procs(alive, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    return ended


def die_with_parent() -> Any:
    """A ``preexec_fn`` that has the child get SIGTERM should its parent die (Linux's PR_SET_PDEATHSIG), or None.

    The backstop for a test run killed outright (SIGKILL), when no teardown runs: the server then
    shuts its kernels down itself. ``prctl`` is looked up here, before the fork.
    """
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, int(signal.SIGTERM))


@contextlib.contextmanager
def terminate_as_interrupt():
    """While inside, SIGTERM raises KeyboardInterrupt, so teardowns still stop the server and the browser."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def end_group(proc: subprocess.Popen, wait: float) -> bool:
    """SIGTERM, then SIGKILL, to the process group ``proc`` leads (``start_new_session``), waiting ``wait``
    seconds after each; whether ``proc`` ended."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return True
        except subprocess.TimeoutExpired:
            continue
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
