"""Checkpoints: config, safetensors weights, metrics and a sha256 manifest, read one version at a time. A directory
is ours only by our own marker; nothing is ever unpickled."""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from ._version import __version__
from .config import ModelConfig
from .files import JSON_LIMIT, CheckpointError, json_bytes, parse_json, plain_json, read_regular, try_json, write_file
from .model import GPT, build_model
from .store import MissingFile, atomic_directory, read_version
from .store import find_version as _find_version
from .validation import check_has_weights, check_path

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
CONFIG, WEIGHTS, METRICS = "config.json", "model.safetensors", "metrics.json"
RESERVED = (CONFIG, WEIGHTS, METRICS, MANIFEST)
RESERVED_KEYS = ("format", "package_version", "model")  # config.json keys ``extra`` may not set


# ---------------------------------------------------------------------------------------------- parsing
def _parse_tensors(data: bytes, where: Path) -> dict[str, torch.Tensor]:
    """A pickle or a truncated file is refused, never executed."""
    try:
        return load_tensors(data)
    except (SafetensorError, ValueError) as e:
        raise CheckpointError(f"{where} is not a valid safetensors file: {e}") from e


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """One safetensors file; any problem a ``CheckpointError``."""
    path = Path(path)
    try:
        return _parse_tensors(read_regular(path), path)
    except FileNotFoundError:
        raise CheckpointError(f"missing file {path}") from None


# ---------------------------------------------------------------------------------------------- recognising one
def is_checkpoint(path: str | os.PathLike) -> bool:
    """Laid out as a checkpoint (ownership is checked on read)."""
    p = Path(path)
    return (p.is_dir() and not p.is_symlink()
            and (os.path.lexists(p / MANIFEST) or (os.path.lexists(p / CONFIG) and os.path.lexists(p / WEIGHTS))))


def owned_names(path: Path) -> set[str] | None:
    """Files our save wrote in ``path``; None without our marker."""
    manifest = try_json(path / MANIFEST)
    if (isinstance(manifest, dict) and manifest.get("format") == FORMAT_VERSION
            and isinstance(manifest.get("files"), dict)):
        return set(manifest["files"]) | {MANIFEST}
    header = try_json(path / CONFIG)
    if isinstance(header, dict) and header.get("format") == FORMAT_VERSION and isinstance(header.get("model"), dict):
        return set(RESERVED)  # a checkpoint whose manifest was deleted: config, weights, metrics
    return None


def find_checkpoint(path: str | os.PathLike) -> Path | None:
    """``path``, or the old version a killed save set aside."""
    return _find_version(Path(path), is_checkpoint)


# ---------------------------------------------------------------------------------------------- reading one version
def _manifest_files(data: bytes, where: Path) -> dict[str, dict[str, Any]]:
    manifest = parse_json(data, where)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("size"), int) and isinstance(e.get("sha256"), str)
            for e in files.values()):
        raise CheckpointError(f"{where} is not a checkpoint manifest")
    return files


def _read_version(fd: int, where: Path, names: tuple[str, ...], verify: bool) -> tuple[dict[str, bytes], bool]:
    """``names`` from ``fd``, checked against the manifest; and whether unverified."""
    present = set(os.listdir(fd))
    listing, unverified = None, False
    if MANIFEST in present:
        listing = _manifest_files(read_regular(MANIFEST, fd, limit=JSON_LIMIT, where=where / MANIFEST),
                                  where / MANIFEST)
    elif CONFIG in present:
        header = parse_json(read_regular(CONFIG, fd, limit=JSON_LIMIT, where=where / CONFIG), where / CONFIG)
        fmt = header.get("format") if isinstance(header, dict) else None
        if fmt == FORMAT_VERSION:
            if verify:  # or a version being deleted under us: read_version tells which
                raise MissingFile(f"{where} has no {MANIFEST}: pass verify=False to load it unverified",
                                  str(where / MANIFEST))
            unverified = True
    files = {}
    for name in names:
        if name not in present:
            raise FileNotFoundError(2, "missing file", str(where / name))
        entry = listing.get(name) if listing is not None and verify else None
        if listing is not None and verify and entry is None and name in RESERVED:
            raise CheckpointError(f"{where / MANIFEST} does not list {name}")
        data = files[name] = read_regular(name, fd, size=None if entry is None else entry["size"],
                                          limit=JSON_LIMIT if name.endswith(".json") else None, where=where / name)
        if entry is not None and hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise CheckpointError(f"{where / name} does not match its sha256 in {MANIFEST} (verify=False skips it)")
    return files, unverified


def _missing(path: Path) -> str:
    if path.is_dir():
        return f"{path} is not a checkpoint (no {CONFIG} + {WEIGHTS} or {MANIFEST})"
    return f"no checkpoint directory at {path} (missing file {path / CONFIG})"


def read_checkpoint(path: str | os.PathLike, names: tuple[str, ...], verify: bool = True) -> dict[str, Any]:
    """``names`` from one version of ``path``, parsed."""
    path = Path(path)
    files, unverified = read_version(path, lambda fd, where: _read_version(fd, where, names, verify),
                                     is_checkpoint, _missing)
    if unverified:
        warnings.warn(f"{path} has no {MANIFEST}: loaded unverified (verify=False)", stacklevel=3)
    return {name: _parse_tensors(data, path / name) if name.endswith(".safetensors") else parse_json(data, path / name)
            for name, data in files.items()}


# ---------------------------------------------------------------------------------------------- the public API
def _check_extra_names(extra_files: dict[str, Any]) -> None:
    for name in extra_files:
        if (not isinstance(name, str) or name != os.path.basename(name) or name.startswith(".")
                or name in RESERVED or not name.endswith((".safetensors", ".json"))):
            raise ValueError(f"extra_files name {name!r} is invalid: must be a plain *.safetensors or *.json "
                             f"name not in {list(RESERVED)}")


def _tensor_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    return save_tensors({k: v.detach().contiguous().cpu() for k, v in tensors.items()})


def _check_model(model: Any) -> GPT:
    if not isinstance(model, GPT):
        hint = " (a TrainResult: pass result.model)" if hasattr(model, "model") else ""
        raise TypeError(f"model must be a workbench GPT, got {type(model).__name__}{hint}")
    return model


def _check_extra(extra: Any) -> dict[str, Any]:
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        raise ValueError(f"extra={type(extra).__name__} is invalid: must be a dict or None")
    taken = sorted(k for k in extra if k in RESERVED_KEYS)
    if taken:
        raise ValueError(f"extra keys {taken} are invalid: {list(RESERVED_KEYS)} are config.json's own")
    return plain_json(extra, "extra")


def _check_metrics(metrics: Any) -> dict[str, Any]:
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics={type(metrics).__name__} is invalid: must be a dict or None")
    return plain_json(metrics, "metrics")


def save_checkpoint(model: GPT, path: str | os.PathLike, metrics: dict[str, Any] | None = None,
                    extra: dict[str, Any] | None = None,
                    extra_files: dict[str, dict[str, torch.Tensor] | Any] | None = None) -> Path:
    """Write ``model`` and ``metrics`` to ``path`` as one new version, all checked first; a user's files are kept."""
    model = _check_model(model)
    check_has_weights("model", model)  # a meta model has shapes only: nothing to write
    check_path("path", path)
    extra_files = extra_files or {}
    _check_extra_names(extra_files)
    header = {**_check_extra(extra), "format": FORMAT_VERSION, "package_version": __version__,
              "model": model.config.to_dict()}
    files = {WEIGHTS: _tensor_bytes(model.state_dict()), CONFIG: json_bytes(header, "config.json"),
             METRICS: json_bytes(_check_metrics(metrics), "metrics")}
    for name, content in extra_files.items():
        files[name] = _tensor_bytes(content) if name.endswith(".safetensors") else json_bytes(content, name)
    listing = {name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in files.items()}
    manifest = {"format": FORMAT_VERSION, "files": listing}
    with atomic_directory(path, owned_names, is_version=is_checkpoint) as tmp:
        for name, data in files.items():
            write_file(tmp / name, data)
        write_file(tmp / MANIFEST, json_bytes(manifest))  # last: a version with a manifest is complete
    return Path(path)


def _header_config(header: Any, path: Path) -> ModelConfig:
    if not isinstance(header, dict) or "model" not in header:
        raise CheckpointError(f"{path}/{CONFIG} has no 'model' entry")
    if header.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {header.get('format')!r}, expected {FORMAT_VERSION}")
    try:
        return ModelConfig.from_dict(header["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}/{CONFIG}: {e}") from None


def load_config(path: str | os.PathLike, verify: bool = True) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and the whole config.json."""
    header = read_checkpoint(path, (CONFIG,), verify)[CONFIG]
    return _header_config(header, Path(path)), header


def check_weights(state: dict[str, torch.Tensor], config: ModelConfig, where: Path,
                  allow_nonfinite: bool = False) -> None:
    """Names, shapes, floating dtype; finite unless allowed."""
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
            raise CheckpointError(f"{where}: non-finite weights in {bad[:5]} (allow_nonfinite=True loads them)")


def load_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None, *,
                    allow_nonfinite: bool = False, verify: bool = True) -> GPT:
    """Rebuild the model in ``path``, checked against its config (an edited one would load as another model)."""
    path = Path(path)
    files = read_checkpoint(path, (CONFIG, WEIGHTS), verify)
    config, state = _header_config(files[CONFIG], path), files[WEIGHTS]
    check_weights(state, config, path / WEIGHTS, allow_nonfinite)
    dtype = next(iter(state.values())).dtype
    model = build_model(config, device=device, dtype=dtype)
    model.load_state_dict(state)
    return model.eval()


def load_metrics(path: str | os.PathLike, verify: bool = True) -> dict[str, Any]:
    """metrics.json of the checkpoint ``path``."""
    return read_checkpoint(path, (METRICS,), verify)[METRICS]
