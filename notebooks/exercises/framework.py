"""The exercise-check framework every ``check_*`` is built from."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from workbench.analysis.probes import random_init_model
from workbench.config import ModelConfig
from workbench.model import GPT, build_model

VOCAB, T = 29, 9  # small enough to run in a blink, long enough that strided subsets are uneven


def practice_model(mechanism: str = "none", seed: int = 0, **overrides: object) -> GPT:
    """A tiny float64 model with every matrix redrawn, in eval mode.

    A fresh model zeroes its output and recurrent projections, so a wrong answer could match by accident; here every
    path carries signal (LRT starts at ``gamma = 0.5`` for the same reason).
    """
    config = ModelConfig(vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=16, seq_len=T, mechanism=mechanism,
                         tie_embeddings=mechanism == "fbt", lrt_gamma_init=0.5, **overrides)
    return random_init_model(build_model(config, dtype=torch.float64), seed=seed)


def practice_tokens(batch: int = 3, seed: int = 0) -> torch.Tensor:
    """Seeded token ids (batch, T): the same inputs every run, so a message names the same positions."""
    return torch.randint(0, VOCAB, (batch, T), generator=torch.Generator().manual_seed(seed))


def close(got: object, expected: torch.Tensor, what: str, hint: str, atol: float = 1e-8) -> None:
    """``got`` must be a tensor of ``expected``'s shape and values; otherwise say where it is not."""
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor of shape {tuple(expected.shape)}, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    diff = (got.detach().to(expected.dtype) - expected).abs()
    if not bool(diff.max() <= atol):
        if diff.ndim >= 2:  # (B, T, ...): name the positions that are off
            bad = (diff.flatten(2).amax(-1) if diff.ndim > 2 else diff).amax(0) > atol
            where = f" at positions {bad.nonzero().flatten().tolist()}"
        else:
            where = ""
        raise AssertionError(f"{what}: differs{where} (largest difference {float(diff.max()):.3g}). {hint}")


def as_number(got: object, what: str, hint: str) -> float:
    """``got`` as a float, when it is one number (a float, or a one-element tensor); otherwise say so."""
    if isinstance(got, bool) or not isinstance(got, (int, float, np.floating, np.integer, torch.Tensor)) or (
            isinstance(got, torch.Tensor) and got.numel() != 1):
        raise AssertionError(f"{what}: fn must return one number (a float), got {type(got).__name__}. {hint}")
    return float(got)


def passed(what: str) -> None:
    print(f"ok: {what}")


def raised_by(error: BaseException, fn: Callable) -> bool:
    """Whether ``error`` was raised in ``fn``'s own body (the stub), not somewhere it calls."""
    code, tb = getattr(fn, "__code__", None), error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code is code


def exercise(solution: Callable) -> Callable[[Callable], Callable]:
    """Make ``check(fn, ...)`` an exercise check: it returns ``fn`` once it passes; while ``fn`` is the stub it prints
    ``not done yet: ...`` and returns ``solution`` so later cells run. Any other error, ``AssertionError`` included,
    propagates."""
    def wrap(check: Callable[..., None]) -> Callable[..., Callable]:
        @functools.wraps(check)
        def run(fn: Callable, *args: Any, **kwargs: Any) -> Callable:
            try:
                check(fn, *args, **kwargs)
            except NotImplementedError as error:
                if not raised_by(error, fn):
                    raise
                name = getattr(fn, "__name__", "your function")
                said = f" ({error})" if str(error) else ""
                print(f"not done yet: {name} is still the stub{said}. Write it in the cell above (the hints "
                      f"are folded under it), then run this cell again. Until it passes, the cells below use "
                      f"the reference solution, exercises.solutions.{solution.__name__}.", file=sys.stdout)
                return solution
            return fn
        run.solution = solution
        return run
    return wrap


CHECKS: dict[str, Callable] = {}  # every exercise check by name, filled by ``register``; tests run each on its solution


def register(check: Callable) -> Callable:
    CHECKS[check.__name__] = check
    return check
