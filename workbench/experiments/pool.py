"""Independent work in one-thread worker processes: small models use one core well."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..validation import fail
from .common import step_flops
from .core import RunSpec
from .runs import train_run


def _one_thread(fn: Callable[..., Any], args: tuple) -> Any:
    import torch

    torch.set_num_threads(1)
    return fn(*args)


def map_jobs(fn: Callable[..., Any], calls: Sequence[tuple], jobs: int = 1, desc: str = "") -> list[Any]:
    """``[fn(*args) for args in calls]`` in ``jobs`` workers; pass checkpoint paths, not models."""
    if not (isinstance(jobs, int) and jobs >= 1):
        fail("jobs", jobs, "must be an integer >= 1")
    if jobs == 1 or len(calls) <= 1:
        return [fn(*args) for args in tqdm(calls, desc=desc, leave=False)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(jobs, len(calls)), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_one_thread, fn, args) for args in calls]
        return [f.result() for f in tqdm(futures, desc=desc, leave=False)]


def _train_saved(spec: RunSpec, path: Path, scratch: Path, force: bool) -> str:
    """Train and save one run; only its name comes back."""
    train_run(spec, path, scratch, force)
    return spec.name


def train_parallel(stale: list[RunSpec], out: Path, scratch: Path, force: bool, jobs: int) -> None:
    """Train stale runs ``jobs`` at a time, longest first."""
    # by training FLOPs: the last run to start is a short one
    stale = sorted(stale, key=lambda s: step_flops(s.train) * s.train.steps, reverse=True)
    map_jobs(_train_saved, [(s, out / s.name, scratch, force) for s in stale], jobs, desc="parallel runs")


def makespan(seconds: list[float], workers: int) -> float:
    """Wall time of these jobs on ``workers`` workers, longest first, on a quiet machine."""
    if workers < 1:
        fail("workers", workers, "must be >= 1")
    loads = [0.0] * workers
    for s in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)
