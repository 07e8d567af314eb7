"""A training run's directory: its files, its lock (a second trainer fails at once, not interleaving histories), and
whether a run may go on."""

from __future__ import annotations

import contextlib
import csv
import fcntl
import math
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from .checkpoint import find_checkpoint, owned_names
from .files import CheckpointError, read_json, try_json, write_json_atomic
from .train_config import TrainConfig
from .validation import fail

CHECKPOINT_DIR = "checkpoint"
HISTORY_FILE = "history.csv"
FIGURE_FILE = "loss.png"
CONFIG_FILE = "train_config.json"
STATE_FILE = "train_state.json"
LOCK_FILE = ".trainer.lock"
EVAL_COLUMNS = ("val_loss", "val_bpb", "val_accuracy")


def history_columns(cfg: TrainConfig) -> list[str]:
    """Fixed per config, so an appended ``history.csv`` stays rectangular."""
    passes = [f"loss_pass{k}" for k in range(1, cfg.max_passes + 1)]
    return ["step", "tokens", "flops", "passes", "loss", *passes, "lr", "grad_norm", "seconds", *EVAL_COLUMNS]


def _cell(value: Any) -> str:
    """repr of a float round-trips bit for bit; missing is empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(float(value)) if isinstance(value, float) else str(value)


def _parse_cell(text: str) -> float | int | None:
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


class History:
    """Rows in memory, and appended to ``history.csv``."""

    def __init__(self, columns: list[str], path: Path | None, keep_until: int | None) -> None:
        """``keep_until``: the resumed step, after which rows are dropped; None: a fresh file."""
        self.columns, self.path, self.rows = columns, path, []
        if path is None:
            return
        kept: list[list[str]] = []
        if keep_until is not None and path.exists():
            with path.open(newline="") as f:
                lines = list(csv.reader(f))
            if lines and lines[0] != columns:
                raise ValueError(f"{path} has columns {lines[0]}, this config writes {columns}")
            rows = [r for r in lines[1:] if len(r) == len(columns)]  # a row cut by a kill is dropped
            if not all(r[0].isdigit() for r in rows):
                raise ValueError(f"{path} has rows whose step is not a step number")
            kept = [r for r in rows if int(r[0]) <= keep_until]
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("w", newline="") as f:
            csv.writer(f).writerows([columns, *kept])
        os.replace(tmp, path)
        self.rows = [{c: _parse_cell(v) for c, v in zip(columns, r)} for r in kept]

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self.path is not None:
            with self.path.open("a", newline="") as f:
                csv.writer(f).writerow([_cell(row.get(c)) for c in self.columns])

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=self.columns).astype(float).astype({"step": int, "tokens": int,
                                                                                     "passes": int})


def check_counters(state: Any, where: Path, steps: int) -> None:
    """Check ``train_state.json``'s counters."""
    def number(key: str, kinds: tuple[type, ...]) -> bool:
        v = state.get(key)
        return isinstance(v, kinds) and not isinstance(v, bool) and math.isfinite(v) and v >= 0

    if not (isinstance(state, dict) and number("step", (int,)) and 1 <= state["step"] <= steps
            and number("tokens", (int,)) and all(number(k, (int, float)) for k in ("flops", "seconds", "cpu_seconds"))):
        raise CheckpointError(f"{where} is invalid: needs step in [1, {steps}] and tokens, flops, seconds, "
                              f"cpu_seconds >= 0; got {str(state)[:200]}")


def _logged_rows(path: Path) -> bool:
    if not path.is_file():
        return False
    with path.open() as f:
        return len(f.readlines()[:2]) > 1


def _stored_config(out: Path) -> dict[str, Any]:
    data = read_json(out / CONFIG_FILE)
    try:
        return TrainConfig.from_dict(data).trajectory_dict()
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{out / CONFIG_FILE} is not a valid train config: {e}") from None


def _is_our_run(out: Path) -> bool:
    data = try_json(out / CONFIG_FILE)
    try:
        TrainConfig.from_dict(data)
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def _check_foreign_files(out: Path, overwrite: bool) -> None:
    """A fresh run must not replace files not ours."""
    ckpt = out / CHECKPOINT_DIR
    if os.path.lexists(ckpt) and not (ckpt.is_dir() and not ckpt.is_symlink()
                                      and (not any(ckpt.iterdir()) or owned_names(ckpt) is not None)):
        fail("TrainConfig.out_dir", str(out), f"{ckpt} is not a checkpoint of ours")
    clash = [name for name in (CONFIG_FILE, HISTORY_FILE, FIGURE_FILE) if os.path.lexists(out / name)]
    if clash and not overwrite and not _is_our_run(out):
        fail("TrainConfig.out_dir", str(out), f"it holds {clash}, not ours; overwrite=True (--overwrite) replaces them")


def prepare_run_dir(cfg: TrainConfig, main: bool) -> tuple[Path | None, bool]:
    """The run directory, checked against ``resume``, and whether to load a checkpoint."""
    if cfg.out_dir is None:
        return None, False
    out = Path(cfg.out_dir)
    has_checkpoint = find_checkpoint(out / CHECKPOINT_DIR) is not None
    if not has_checkpoint:
        _check_foreign_files(out, cfg.overwrite)
    if has_checkpoint and not cfg.resume:
        raise ValueError(f"{out} already holds a run: resume=True (--resume) continues it")
    if cfg.resume and not has_checkpoint and _logged_rows(out / HISTORY_FILE):
        raise ValueError(f"cannot resume {out}: {HISTORY_FILE} holds a run but {out / CHECKPOINT_DIR} has no "
                         f"usable checkpoint")
    if cfg.resume and has_checkpoint:
        # out_dir is not part of a run's identity: a run moved, or resumed from elsewhere, is the same run
        previous, current = _stored_config(out), cfg.trajectory_dict()
        diff = sorted(k for k, v in current.items() if previous.get(k) != v)
        if diff:
            raise ValueError(f"cannot resume {out}: the config differs in {diff} (stored: "
                             f"{[previous.get(k) for k in diff]})")
    elif main:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / CONFIG_FILE, cfg.to_dict())
    return out, cfg.resume and has_checkpoint


@contextlib.contextmanager
def hold_run_dir(out_dir: str | None) -> Iterator[None]:
    """Hold the run directory's lock for the block; the kernel frees ``flock`` however the holder ends."""
    if out_dir is None:
        yield
        return
    out = Path(out_dir)
    if os.path.lexists(out) and not out.is_dir():
        fail("TrainConfig.out_dir", out_dir, f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "unnamed"
            os.close(fd)
            raise ValueError(f"{out} is in use by another trainer ({holder})") from None
        if os.path.exists(path) and os.path.samestat(os.fstat(fd), os.stat(path)):
            break
        os.close(fd)  # the previous holder removed the file between our open and our lock: take the new one
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
              .encode(), 0)
    try:
        yield
    finally:
        os.unlink(path)
        os.close(fd)
