"""A recipe's stale runs trained side by side, one torch thread per worker process.

Small models use one core well, so two runs on two cores finish in about half the wall time of
running them one after the other at two threads; ``makespan`` says what that wall time is.
"""

from __future__ import annotations

from pathlib import Path

from tqdm.auto import tqdm

from .common import step_flops
from .core import RunSpec
from .runs import train_run


def _train_in_worker(spec: RunSpec, path: Path, scratch: Path, force: bool) -> str:
    """One stale run trained in a worker process of one torch thread (``reproduce(jobs=...)``); the parent
    loads what it saved."""
    import torch

    torch.set_num_threads(1)
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
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not stale:
        return
    stale = sorted(stale, key=_training_flops, reverse=True)  # longest first: the last run to start is a short one
    with ProcessPoolExecutor(min(jobs, len(stale)), mp_context=multiprocessing.get_context("spawn")) as pool:
        for done in tqdm([pool.submit(_train_in_worker, s, out / s.name, scratch, force) for s in stale],
                         desc="parallel runs", leave=False):
            done.result()


def makespan(seconds: list[float], workers: int) -> float:
    """Wall time of jobs of these durations on ``workers`` workers, longest first to the least loaded one (the
    order ``reproduce(jobs=...)`` submits them): on a shared machine, the wall a quiet one would take."""
    if workers < 1:
        raise ValueError(f"workers={workers!r} is invalid: must be >= 1")
    loads = [0.0] * workers
    for s in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)
