"""Files read and written safely: strict JSON, bounded non-blocking reads, atomic writes."""

from __future__ import annotations

import csv
import errno
import json
import math
import numbers
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

JSON_LIMIT = 256 * 2**20  # no JSON file of ours comes near this; a bigger one is not ours


class CheckpointError(ValueError):
    """A checkpoint missing, damaged, edited or not ours."""


# ---------------------------------------------------------------------------------------------- JSON
def plain_json(value: Any, where: str, top: bool = True) -> Any:
    """Strict JSON data (scalars as numbers), else a ``ValueError`` naming where (``metrics['loss'][2]``)."""
    if isinstance(value, (np.generic, torch.Tensor)) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise ValueError(f"{where}={value!r} is invalid: must be finite")
        return float(value)
    if isinstance(value, dict):
        kinds = (str,) if top else (str, int)
        bad = [k for k in value if isinstance(k, bool) or not isinstance(k, kinds)]
        if bad:
            raise ValueError(f"{where} has key {bad[0]!r} ({type(bad[0]).__name__}): must be a string")
        return {str(k): plain_json(v, f"{where}[{k!r}]", top=False) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v, f"{where}[{i}]", top=False) for i, v in enumerate(value)]
    raise ValueError(f"{where} holds a {type(value).__name__} ({str(value)[:60]}): not JSON data")


def json_bytes(data: Any, where: str = "data") -> bytes:
    """Strict JSON text of ``data``."""
    return json.dumps(plain_json(data, where, top=False), indent=2, sort_keys=True, allow_nan=False).encode()


def parse_json(data: bytes, where: Path) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{where} is not valid JSON ({e})") from e


# ---------------------------------------------------------------------------------------------- reading a file
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def read_regular(name: str | os.PathLike, dir_fd: int | None = None, *, size: int | None = None,
                 limit: int | None = None, where: Path | None = None) -> bytes:
    """A regular file's bytes, opened non-blocking and checked by ``fstat`` first: nothing else is ever read."""
    where = Path(where if where is not None else name)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CheckpointError(f"{where} is a symbolic link: refused") from None
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "missing file", str(where)) from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{where} is {_kind(st.st_mode)}, not a regular file")
        if size is not None and st.st_size != size:
            raise CheckpointError(f"{where} is {st.st_size} bytes, its manifest says {size}: truncated?")
        if limit is not None and st.st_size > limit:
            raise CheckpointError(f"{where} is {st.st_size} bytes, over the limit {limit}")
        data = f.read(st.st_size)
    if len(data) != st.st_size:
        raise CheckpointError(f"{where} changed size while being read")
    return data


def read_json(path: str | os.PathLike) -> Any:
    """One JSON file; any problem a ``CheckpointError``."""
    path = Path(path)
    try:
        return parse_json(read_regular(path, limit=JSON_LIMIT), path)
    except FileNotFoundError:
        raise CheckpointError(f"missing file {path}") from None


def try_json(path: Path) -> Any:
    """None when absent, irregular or not JSON."""
    try:
        return json.loads(read_regular(path, limit=16 * 2**20))
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------- writing a file
def write_file(path: Path, data: bytes) -> None:
    """fsync: a swapped-in version survives a power cut too."""
    with path.open("xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def current_umask() -> int:
    """Read by setting it, then put straight back."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Via a renamed temporary, with ``open(path, "w")``'s permissions (not mkstemp's 0600)."""
    path = Path(path)
    mode = path.stat().st_mode & 0o7777 if path.is_file() else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_csv(path: str | os.PathLike, table: Any) -> None:
    """Strings quoted: else a carriage return reads back as a row break."""
    write_bytes_atomic(path, table.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC).encode())


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """``data`` as checked JSON, written atomically."""
    write_bytes_atomic(path, json_bytes(data, Path(path).name))
