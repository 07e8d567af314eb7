"""Checkpoints: a directory of safetensors + JSON that a reader sees whole, one version at a time.

Layout of ``checkpoints/NAME/`` (a plain directory: every file can also be read directly)::

    config.json          {"format": 1, "package_version": ..., "model": ModelConfig fields, ...extra}
    model.safetensors    the state dict (tied weights stored once)
    metrics.json         whatever the caller recorded (losses, eval numbers, recipe, seed)
    manifest.json        size and sha256 of every file the save wrote (checkpoints written before it
                         existed have none, and load as they always did)

Writing: the new version is written complete under a temporary name beside the destination (held
under ``flock``, so a concurrent save's clean-up leaves it alone) and swapped with the old one by
one atomic ``renameat2(RENAME_EXCHANGE)``: there is no instant with no checkpoint at the path.
Where the exchange is unavailable (not Linux, some network filesystems) the old version is first
renamed aside (``.NAME.old-*``); a kill between the two renames leaves it there, where loads find it
and the next save puts it back. The next successful save deletes what interrupted saves left.
Only a directory that is itself a checkpoint (or empty) is ever replaced.

Reading: the directory is opened once and every file read through that handle, so one load sees
one version even while a writer swaps another in; a version deleted under a reader is read again
from the new one. The manifest is checked file by file (size, then hash), so a truncated, replaced
or edited file is refused by name. Nothing is ever unpickled.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import glob
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from ._version import __version__
from .config import ModelConfig
from .model import GPT, build_model

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CONFIG, WEIGHTS, METRICS = "config.json", "model.safetensors", "metrics.json"
RESERVED = (CONFIG, WEIGHTS, METRICS, MANIFEST)
_READ_ATTEMPTS = 200  # a reader retries while writers keep replacing the version it opened


class CheckpointError(ValueError):
    """A checkpoint directory is missing, incomplete, truncated, edited or not ours."""


# ---------------------------------------------------------------------------------------------- parsing
def _parse_json(data: bytes, where: Path) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{where} is not valid JSON ({e})") from e


def _parse_tensors(data: bytes, where: Path) -> dict[str, torch.Tensor]:
    """Safetensors bytes to tensors; anything else (a pickle, a truncated file) is refused, never executed."""
    try:
        return load_tensors(data)
    except (SafetensorError, ValueError) as e:
        raise CheckpointError(f"{where} is not a valid safetensors file (truncated or foreign?): {e}") from e


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise CheckpointError(f"missing file {path}")
    return path.read_bytes()


def read_json(path: str | os.PathLike) -> Any:
    """One JSON file, any problem a ``CheckpointError`` naming it."""
    return _parse_json(_read_bytes(Path(path)), Path(path))


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """One safetensors file, any problem a ``CheckpointError`` naming it."""
    return _parse_tensors(_read_bytes(Path(path)), Path(path))


def _json_bytes(data: Any) -> bytes:
    return json.dumps(data, indent=2, sort_keys=True, default=float).encode()


def _write_file(path: Path, data: bytes) -> None:
    """Write and fsync, so a swapped-in version survives a power cut as well as a kill."""
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON through a temporary file and rename it into place (the temporary never outlives a failure)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        _write_file(Path(tmp), _json_bytes(data))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---------------------------------------------------------------------------------------------- what may be replaced
def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def is_checkpoint(path: str | os.PathLike) -> bool:
    """A directory this module could have written: a manifest, or the older layout's config + weights."""
    p = Path(path)
    return p.is_dir() and ((p / MANIFEST).is_file() or ((p / CONFIG).is_file() and (p / WEIGHTS).is_file()))


def _looks_saved(path: Path) -> bool:
    """Any saved model directory (ours or Hugging Face's: both carry a config.json)."""
    return (path / CONFIG).is_file()


def _check_replaceable(path: Path, replaceable: Callable[[Path], bool]) -> None:
    """Refuse to put a directory where something that is not a saved model (or empty) stands."""
    if path.is_symlink():
        what = "a symbolic link (save to its target instead)"
    elif os.path.lexists(path) and not path.is_dir():
        what = "a file, not a directory"
    elif path.is_dir() and not (_is_empty_dir(path) or replaceable(path)):
        names = sorted(p.name for p in path.iterdir())
        what = f"a directory that is not a checkpoint (it holds {names[:6]}{' ...' if len(names) > 6 else ''})"
    else:
        return
    raise CheckpointError(f"refusing to replace {path}: it is {what}; choose another path or remove it yourself")


# ---------------------------------------------------------------------------------------------- swapping
def _siblings(path: Path, kind: str) -> list[Path]:
    """Temporaries (``tmp``) or set-aside old versions (``old``) of interrupted saves of ``path``, newest first."""
    found = [Path(p) for p in glob.glob(str(path.parent / f".{glob.escape(path.name)}.{kind}-*"))]
    return sorted(found, key=_mtime, reverse=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # deleted meanwhile by another save's clean-up
        return 0.0


def find_checkpoint(path: str | os.PathLike) -> Path | None:
    """Where the current version of the checkpoint ``path`` lies: ``path`` itself, or, when a save was
    killed between its two renames, the old version it had set aside; None when there is none."""
    path = Path(path)
    if is_checkpoint(path) and not path.is_symlink():
        return path
    if os.path.lexists(path):
        return None
    return next((p for p in _siblings(path, "old") if is_checkpoint(p)), None)


_libc = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where the system cannot."""
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(tmp: Path, path: Path, replaceable: Callable[[Path], bool]) -> None:
    """Put the complete directory ``tmp`` at ``path``; what stood there ends at ``tmp`` or is deleted."""
    for _ in range(100):  # each pass either succeeds or saw another writer move things: try again
        if not os.path.lexists(path):
            try:
                os.rename(tmp, path)
                return
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                continue
        _check_replaceable(path, replaceable)
        if _exchange(tmp, path):
            if _is_empty_dir(tmp) or replaceable(tmp):
                return
            _exchange(tmp, path)  # something else arrived since the check: put it back
            _check_replaceable(path, replaceable)
            continue
        aside = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:12]}")
        try:
            os.rename(path, aside)
            os.rename(tmp, path)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            continue
        shutil.rmtree(aside, ignore_errors=True)
        return
    raise CheckpointError(f"could not replace {path}: other writers kept replacing it")


def _restore_set_aside(path: Path) -> None:
    """A save killed between its two renames left no ``path``: put its old version back."""
    found = find_checkpoint(path)
    if found is not None and found != path:
        try:
            os.rename(found, path)
        except OSError:
            pass  # another process restored it first or is writing: either way there is a checkpoint


def _collect(path: Path) -> None:
    """Delete what interrupted saves of ``path`` left, except temporaries a live writer holds."""
    for leftover in _siblings(path, "tmp") + _siblings(path, "old"):
        try:
            fd = os.open(leftover, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(leftover, ignore_errors=True)
        except BlockingIOError:
            pass  # a writer is still filling it
        finally:
            os.close(fd)


@contextmanager
def atomic_directory(path: str | os.PathLike,
                     replaceable: Callable[[Path], bool] = _looks_saved) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces ``path`` only if the block succeeds.

    ``path`` may be absent, an empty directory or one ``replaceable`` accepts (default: a saved
    model directory); anything else is refused before a byte is written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _restore_set_aside(path)
    _check_replaceable(path, replaceable)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes 0700; the swapped-in directory must read like any other
    lock = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield tmp
        os.fsync(lock)
        _swap_in(tmp, path, replaceable)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dir_fd)
        os.close(dir_fd)
    finally:
        os.close(lock)
        shutil.rmtree(tmp, ignore_errors=True)  # after a swap: the old version
    _collect(path)


# ---------------------------------------------------------------------------------------------- reading one version
def _read_version(fd: int, where: Path, names: tuple[str, ...], verify: bool) -> dict[str, bytes]:
    """The files ``names`` of the directory open as ``fd``, checked against its manifest when it has one."""
    present = set(os.listdir(fd))
    manifest = None
    if MANIFEST in present:
        manifest = _parse_json(_read_at(fd, MANIFEST), where / MANIFEST)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
            raise CheckpointError(f"{where / MANIFEST} is not a checkpoint manifest")
    files = {}
    for name in names:
        if name not in present:
            raise FileNotFoundError(errno.ENOENT, "missing file", str(where / name))
        data = files[name] = _read_at(fd, name)
        entry = manifest["files"].get(name) if manifest is not None and verify else None
        if manifest is not None and verify and entry is None and name in RESERVED:
            raise CheckpointError(f"{where / MANIFEST} does not list {name}: not the manifest of this checkpoint")
        if entry is not None and len(data) != entry.get("size"):
            raise CheckpointError(f"{where / name} is {len(data)} bytes, its manifest says {entry.get('size')}: "
                                  f"truncated or replaced after saving")
        if entry is not None and hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise CheckpointError(f"{where / name} does not match its sha256 in {MANIFEST}: edited or corrupted "
                                  f"after saving (pass verify=False to load it anyway)")
    return files


def _read_at(fd: int, name: str) -> bytes:
    file_fd = os.open(name, os.O_RDONLY, dir_fd=fd)
    with os.fdopen(file_fd, "rb") as f:
        return f.read()


def _same_directory(fd: int, where: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(where))
    except OSError:
        return False


def read_checkpoint(path: str | os.PathLike, names: tuple[str, ...], verify: bool = True) -> dict[str, Any]:
    """The files ``names`` from one version of the checkpoint ``path`` (never a mix of two), parsed:
    ``.json`` as JSON, ``.safetensors`` as a tensor dict."""
    path = Path(path)
    files = _read_files(path, names, verify)
    return {name: _parse_tensors(data, path / name) if name.endswith(".safetensors") else _parse_json(data, path / name)
            for name, data in files.items()}


def _read_files(path: Path, names: tuple[str, ...], verify: bool) -> dict[str, bytes]:
    """The bytes of ``names`` from one version of the checkpoint ``path``.

    A file a concurrent writer deleted under us means a newer version is in place: read that one.
    A file missing from a version that stays put is a ``CheckpointError`` naming it.
    """
    for _ in range(_READ_ATTEMPTS):
        where = find_checkpoint(path)
        if where is None:
            if is_checkpoint(path):  # a writer's rename landed between find_checkpoint's two looks: read it
                continue
            if path.is_dir():
                raise CheckpointError(f"{path} is not a checkpoint (no {CONFIG} + {WEIGHTS} or {MANIFEST})")
            raise CheckpointError(f"no checkpoint directory at {path} (missing file {path / names[0]})")
        try:
            fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            time.sleep(0.001)
            continue
        try:
            return _read_version(fd, where, names, verify)
        except FileNotFoundError as e:
            if where == path and _same_directory(fd, where):
                raise CheckpointError(f"missing file {e.filename}") from None
            time.sleep(0.001)  # this version was deleted under us: a newer one is in place
        finally:
            os.close(fd)
    raise CheckpointError(f"{path} kept changing while being read ({_READ_ATTEMPTS} attempts): try again")


# ---------------------------------------------------------------------------------------------- the public API
def _check_extra_names(extra_files: dict[str, Any]) -> None:
    for name in extra_files:
        if (not isinstance(name, str) or name != os.path.basename(name) or name.startswith(".")
                or name in RESERVED or not name.endswith((".safetensors", ".json"))):
            raise ValueError(f"extra_files name {name!r} is invalid: must be a plain file name (no directory, "
                             f"not hidden) ending in .safetensors or .json, other than {list(RESERVED)}")


def _tensor_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    return save_tensors({k: v.detach().contiguous().cpu() for k, v in tensors.items()})


def save_checkpoint(model: GPT, path: str | os.PathLike, metrics: dict[str, Any] | None = None,
                    extra: dict[str, Any] | None = None,
                    extra_files: dict[str, dict[str, torch.Tensor] | Any] | None = None) -> Path:
    """Write ``model`` (config, weights) and ``metrics`` to the directory ``path`` as one new version.

    ``extra`` goes into config.json beside the model config (recipe name, seed, ...);
    ``extra_files`` maps plain file names to tensor dicts (``.safetensors``) or JSON data
    (``.json``), written inside the same version (the trainer's resumable state). ``path`` must be
    absent, empty or a checkpoint: anything else is refused, never deleted.
    """
    extra_files = extra_files or {}
    _check_extra_names(extra_files)
    header = {"format": FORMAT_VERSION, "package_version": __version__, "model": model.config.to_dict(),
              **(extra or {})}
    files = {WEIGHTS: _tensor_bytes(model.state_dict()), CONFIG: _json_bytes(header),
             METRICS: _json_bytes(metrics or {})}
    for name, content in extra_files.items():
        files[name] = _tensor_bytes(content) if name.endswith(".safetensors") else _json_bytes(content)
    listing = {name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in files.items()}
    manifest = {"format": FORMAT_VERSION, "files": listing}
    with atomic_directory(path, replaceable=is_checkpoint) as tmp:
        for name, data in files.items():
            _write_file(tmp / name, data)
        _write_file(tmp / MANIFEST, _json_bytes(manifest))  # last: a version with a manifest is complete
    return Path(path)


def _header_config(header: Any, path: Path) -> ModelConfig:
    if not isinstance(header, dict) or "model" not in header:
        raise CheckpointError(f"{path}/{CONFIG} has no 'model' entry: not a workbench checkpoint")
    if header.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {header.get('format')!r}, "
                              f"this package reads {FORMAT_VERSION}")
    try:
        return ModelConfig.from_dict(header["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}/{CONFIG}: {e}") from None


def load_config(path: str | os.PathLike, verify: bool = True) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and the rest of config.json (recipe, seed, versions)."""
    header = read_checkpoint(path, (CONFIG,), verify)[CONFIG]
    return _header_config(header, Path(path)), header


def check_weights(state: dict[str, torch.Tensor], config: ModelConfig, where: Path,
                  allow_nonfinite: bool = False) -> None:
    """Every tensor the config expects, with its shape, a floating dtype and (unless allowed) finite values."""
    expected = {k: tuple(v.shape) for k, v in build_model(config, device="meta").state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if missing or unexpected or wrong:
        raise CheckpointError(f"{where}: weights do not match {CONFIG} — missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]}, wrong shape {wrong[:5]}")
    integer = sorted(f"{k} ({v.dtype})" for k, v in state.items() if not v.is_floating_point())
    if integer:
        raise CheckpointError(f"{where}: tensors must be floating point, got {integer[:5]}")
    if not allow_nonfinite:
        bad = sorted(k for k, v in state.items() if not bool(torch.isfinite(v).all()))
        if bad:
            raise CheckpointError(f"{where}: non-finite weights (NaN/inf) in {bad[:5]}; "
                                  f"pass allow_nonfinite=True to load them anyway")


def load_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None, *,
                    allow_nonfinite: bool = False, verify: bool = True) -> GPT:
    """Rebuild the model saved in ``path``, checking every tensor against its config.

    Refused unless asked otherwise: non-finite weights (``allow_nonfinite``) and files that no
    longer match the manifest the save wrote (``verify``: an edited config.json of the same shapes
    would otherwise load silently as a different model).
    """
    path = Path(path)
    files = read_checkpoint(path, (CONFIG, WEIGHTS), verify)
    config, state = _header_config(files[CONFIG], path), files[WEIGHTS]
    check_weights(state, config, path / WEIGHTS, allow_nonfinite)
    dtype = next(iter(state.values())).dtype
    model = build_model(config, device=device, dtype=dtype)
    model.load_state_dict(state)
    return model.eval()


def load_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """metrics.json of the checkpoint ``path``."""
    return read_checkpoint(path, (METRICS,))[METRICS]
