"""Checkpoints: a directory of safetensors + JSON, written atomically, loaded without pickle.

Layout of ``checkpoints/NAME/``::

    config.json          {"format": 1, "package_version": ..., "model": ModelConfig fields, ...extra}
    model.safetensors    the state dict (tied weights stored once)
    metrics.json         whatever the caller recorded (losses, eval numbers, recipe, seed)

A directory is written next to its destination under a temporary name and renamed into place, so
a reader never sees half a checkpoint and a crash leaves the previous one intact. Loading reads
JSON and safetensors only — there is no code path that unpickles — and checks every tensor's name
and shape against the config before the model sees it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .config import ModelConfig
from .model import GPT, build_model

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint directory is missing, incomplete, truncated or not ours."""


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON through a temporary file and rename it into place."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=float)
    os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"missing file {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from e


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Load a safetensors file; anything else (a pickle, a truncated file) is refused, never executed."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"missing file {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a valid safetensors file (truncated or foreign?): {e}") from e


def save_checkpoint(model: GPT, path: str | os.PathLike, metrics: dict[str, Any] | None = None,
                    extra: dict[str, Any] | None = None,
                    extra_files: dict[str, dict[str, torch.Tensor] | Any] | None = None) -> Path:
    """Write ``model`` (config, weights) and ``metrics`` to the directory ``path`` atomically.

    ``extra`` goes into config.json beside the model config (recipe name, seed, ...);
    ``extra_files`` maps file names to tensor dicts (``.safetensors``) or JSON data (``.json``),
    written inside the same atomic step (the trainer's resumable state).
    """
    from . import __version__

    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    header = {"format": FORMAT_VERSION, "package_version": __version__, "model": model.config.to_dict(),
              **(extra or {})}
    with atomic_directory(path) as tmp:
        save_file(state, str(tmp / "model.safetensors"))
        write_json_atomic(tmp / "config.json", header)
        write_json_atomic(tmp / "metrics.json", metrics or {})
        for name, content in (extra_files or {}).items():
            if name.endswith(".safetensors"):
                save_file({k: v.detach().contiguous().cpu() for k, v in content.items()}, str(tmp / name))
            elif name.endswith(".json"):
                write_json_atomic(tmp / name, content)
            else:
                raise ValueError(f"extra_files name {name!r} must end in .safetensors or .json")
    return Path(path)


def load_config(path: str | os.PathLike) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and the rest of config.json (recipe, seed, versions)."""
    header = read_json(Path(path) / "config.json")
    if not isinstance(header, dict) or "model" not in header:
        raise CheckpointError(f"{path}/config.json has no 'model' entry: not a workbench checkpoint")
    if header.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {header.get('format')!r}, "
                              f"this package reads {FORMAT_VERSION}")
    return ModelConfig.from_dict(header["model"]), header


def load_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None) -> GPT:
    """Rebuild the model saved in ``path``, checking every tensor against its config."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint directory at {path}")
    config, _ = load_config(path)
    state = read_safetensors(path / "model.safetensors")
    model = build_model(config, device="meta")
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if missing or unexpected or wrong:
        raise CheckpointError(f"{path}: weights do not match config.json — missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]}, wrong shape {wrong[:5]}")
    dtype = next(iter(state.values())).dtype
    model = build_model(config, device=device, dtype=dtype)
    model.load_state_dict(state)
    return model.eval()


def load_metrics(path: str | os.PathLike) -> dict[str, Any]:
    return read_json(Path(path) / "metrics.json")
