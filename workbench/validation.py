"""Argument checks: bad input fails at the call that made it, not deep inside a forward pass."""

from __future__ import annotations

import math
import os
from typing import NoReturn

import numpy as np
import torch

TOKEN_DTYPES = (torch.int64, torch.int32)  # what an embedding lookup accepts


def fail(name: str, value: object, allowed: str) -> NoReturn:
    """Raise ``name=value is invalid: <allowed>``: every entry point says a bad argument the same way."""
    raise ValueError(f"{name}={value!r} is invalid: {allowed}")


def check_choice(name: str, value: object, choices: tuple) -> None:
    """One of ``choices`` (a bool is not the 1 or 0 it equals)."""
    if isinstance(value, (bool, np.bool_)) or value not in choices:
        fail(name, value, f"must be one of {choices}")


# the largest pass count, subset count, block or prompt length any entry point accepts
MAX_COUNT = 1_000_000


def check_int(name: str, value: object, lo: int, hi: int | None = None) -> None:
    """An int (not a bool) in ``[lo, hi]`` (``hi`` None: unbounded)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo or (
            hi is not None and value > hi):
        raise ValueError(f"{name}={value!r} is invalid: must be an int in [{lo}, {'inf' if hi is None else hi}]")


def check_float(name: str, value: object, lo: float, hi: float | None = None, lo_open: bool = False) -> None:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``): NaN would spread."""
    bad_type = isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating))
    if bad_type or not math.isfinite(value) or (value <= lo if lo_open else value < lo) or (
            hi is not None and value > hi):
        fail(name, value, f"must be a finite number in {'(' if lo_open else '['}{lo}, "
             f"{'inf)' if hi is None else f'{hi}]'}")


def _described(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"shape {tuple(value.shape)}, dtype {value.dtype}"
    return type(value).__name__


def check_positions(positions: object, T: int) -> None:
    """1-D integers >= 0 (a float would index the rotary table between rows, silently)."""
    if not isinstance(positions, torch.Tensor) or positions.dtype not in (*TOKEN_DTYPES, torch.int16, torch.uint8) \
            or positions.numel() != T:
        raise ValueError(f"positions must be an integer tensor of T={T} positions, got {_described(positions)}")
    if positions.device.type == "cpu" and T and not torch.compiler.is_compiling() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got {positions.tolist()[:8]}")


def check_memory(memory: object, memory_mask: object, B: int, T: int, width: int) -> None:
    """Shapes and dtypes only, so the decode step waits for no device."""
    if memory is not None and (not isinstance(memory, torch.Tensor) or tuple(memory.shape) != (B, T, width)
                               or not memory.is_floating_point()):
        raise ValueError(f"memory must be None or a floating-point tensor of shape (B, T, memory_width) = "
                         f"{(B, T, width)}, got {_described(memory)}")
    if memory_mask is not None and (not isinstance(memory_mask, torch.Tensor) or tuple(memory_mask.shape) != (B, T)
                                    or memory_mask.dtype != torch.bool):
        raise ValueError(f"memory_mask must be None or a bool tensor of shape (B, T) = {(B, T)}, got "
                         f"{_described(memory_mask)}")


def check_has_weights(name: str, module: torch.nn.Module, data: torch.Tensor | None = None) -> None:
    """Weights, not only shapes, unless ``data`` is on the meta device too (a dry run)."""
    if (data is None or not data.is_meta) and any(p.is_meta for p in module.parameters()):
        raise ValueError(f"{name}={type(module).__name__} is invalid: it has no weights (meta device); use "
                         "model.to_empty(device='cpu') then init_weights() or load_state_dict(...), or build on cpu")


def check_path(name: str, value: object) -> None:
    """A non-empty str or ``os.PathLike`` (``""`` would mean the current directory)."""
    if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not value):
        fail(name, value, "must be a non-empty str or os.PathLike")


def check_tokens(vocab_size: int, idx: object, name: str = "idx") -> None:
    """(B, T) int ids in ``[0, vocab_size)``; values are read only on the CPU (no device wait, no graph break)."""
    allowed = f"[0, {vocab_size - 1}]"
    if not isinstance(idx, torch.Tensor) or idx.ndim != 2 or idx.numel() == 0 or idx.dtype not in TOKEN_DTYPES:
        raise ValueError(f"{name} must be a non-empty (B, T) int64 or int32 tensor of token ids in {allowed}, "
                         f"got {_described(idx)}")
    if idx.device.type == "cpu" and not torch.compiler.is_compiling():
        lo, hi = (int(v) for v in torch.aminmax(idx))
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"{name} holds token ids in [{lo}, {hi}], outside {allowed}")


def memory_bytes(device: torch.device | str | None = None) -> int | None:
    """All of ``device``'s memory (RAM for the CPU); None where unknown."""
    device = torch.device(device or "cpu")
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # not a POSIX system
            return None
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device.index or 0).total_memory
    return None


def check_fits(name: str, value: object, nbytes: float, what: str, device: torch.device | str | None = None) -> None:
    """Refuse ``nbytes`` beyond all of ``device``'s memory up front, not after a machine swaps until it is killed."""
    total = memory_bytes(device)
    if total is not None and nbytes > total:
        fail(name, value, f"{what} needs {nbytes / 2**30:,.1f} GiB, more than the "
             f"{torch.device(device or 'cpu').type}'s {total / 2**30:,.1f} GiB")

