"""Independent work side by side, one torch thread per worker process: a recipe's stale runs trained, and an
analysis' per-specimen measurements (``map_jobs``).

Small models use one core well, so two runs on two cores finish in about half the wall time of
running them one after the other at two threads; ``makespan`` says what that wall time is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .common import step_flops
from .core import RunSpec
from .runs import train_run


def _one_thread(fn: Callable[..., Any], args: tuple) -> Any:
    """``fn(*args)`` in a worker process, at one torch thread."""
    import torch

    torch.set_num_threads(1)
    return fn(*args)


def map_jobs(fn: Callable[..., Any], calls: Sequence[tuple], jobs: int = 1, desc: str = "") -> list[Any]:
    """``[fn(*args) for args in calls]``, in order: in ``jobs`` spawned worker processes of one torch thread each
    when ``jobs`` > 1 and there is more than one call, else here. A worker imports ``fn`` by name and receives
    ``args`` pickled, so ``fn`` is a module-level function and its arguments name saved checkpoints (paths),
    not models: no model crosses a process boundary, and one process computes the same rows at one thread."""
    if not (isinstance(jobs, int) and jobs >= 1):
        raise ValueError(f"jobs={jobs!r} is invalid: must be an integer >= 1")
    if jobs == 1 or len(calls) <= 1:
        return [fn(*args) for args in tqdm(calls, desc=desc, leave=False)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(jobs, len(calls)), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_one_thread, fn, args) for args in calls]
        return [f.result() for f in tqdm(futures, desc=desc, leave=False)]


def _train_saved(spec: RunSpec, path: Path, scratch: Path, force: bool) -> str:
    """One stale run trained and saved; only its name comes back (the parent loads what was saved)."""
    train_run(spec, path, scratch, force)
    return spec.name


def _training_flops(spec: RunSpec) -> float:
    """A run's training FLOPs by the trainer's own accounting, at its task's longest length (an estimate
    for ordering runs, not a budget)."""
    return step_flops(spec.train) * spec.train.steps


def train_parallel(stale: list[RunSpec], out: Path, scratch: Path, force: bool, jobs: int) -> None:
    """Train a recipe's stale runs ``jobs`` at a time, one torch thread each: small models use
    one core well, so two runs side by side on two cores finish in about half the wall time of
    running them one after the other at two threads."""
    stale = sorted(stale, key=_training_flops, reverse=True)  # longest first: the last run to start is a short one
    map_jobs(_train_saved, [(s, out / s.name, scratch, force) for s in stale], jobs, desc="parallel runs")


def makespan(seconds: list[float], workers: int) -> float:
    """Wall time of jobs of these durations on ``workers`` workers, longest first to the least loaded one (the
    order ``reproduce(jobs=...)`` submits them): on a shared machine, the wall a quiet one would take."""
    if workers < 1:
        raise ValueError(f"workers={workers!r} is invalid: must be >= 1")
    loads = [0.0] * workers
    for s in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)
