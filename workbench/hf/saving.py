"""The saved wrapper: HF's files plus the wrapper's options and weights; nothing is ever unpickled."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file

from ..checkpoint import read_safetensors
from ..files import read_json, try_json, write_json_atomic
from ..store import atomic_directory

if TYPE_CHECKING:
    from .wrapper import FeedbackLM

FEEDBACK_CONFIG = "feedback_config.json"
FEEDBACK_WEIGHTS = "feedback.safetensors"
FORMAT = "workbench.hf/1"


def saved_wrapper_names(path: Path) -> set[str] | None:
    """Files our save wrote in ``path``; None if not ours."""
    saved = try_json(path / FEEDBACK_CONFIG)
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        return None
    files = saved.get("files")
    if not (isinstance(files, list) and all(isinstance(n, str) for n in files)):
        return None
    return set(files) | {FEEDBACK_CONFIG}


def save_wrapper(model: FeedbackLM, path: str | os.PathLike) -> None:
    """``FeedbackLM.save_pretrained``, replacing ``path`` atomically."""
    with atomic_directory(path, saved_wrapper_names) as tmp:
        model.hf.save_pretrained(tmp)
        own = {name: p.detach().contiguous() for name, p in model.mechanism.named_parameters()}
        save_file(own, str(tmp / FEEDBACK_WEIGHTS))
        files = sorted([*os.listdir(tmp), FEEDBACK_CONFIG])
        write_json_atomic(tmp / FEEDBACK_CONFIG, {"format": FORMAT, **model.config.options(), "files": files})


def check_loadable(path: Path, kwargs: dict[str, Any]) -> None:
    """Refuse, before reading anything, what would need unpickling or a download."""
    if not path.is_dir():
        raise ValueError(f"FeedbackLM.from_pretrained: {path} is not a local directory (nothing is downloaded)")
    if kwargs.pop("use_safetensors", True) is not True:
        raise ValueError("FeedbackLM.from_pretrained: use_safetensors must stay True")
    if not any(p.name != FEEDBACK_WEIGHTS for p in path.glob("*.safetensors")):
        pickled = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl"))
        raise ValueError(f"FeedbackLM.from_pretrained: {path} holds no safetensors weights"
                         + (f", only pickled ones {pickled}" if pickled else "") + " (a pickle can run code; "
                         "re-save with safe_serialization=True where you trust it)")


def saved_options(path: Path, options: dict[str, Any]) -> dict[str, Any] | None:
    """A saved wrapper's options (``options`` must agree); None for a plain HF directory."""
    if not os.path.lexists(path / FEEDBACK_CONFIG):
        return None
    saved = read_json(path / FEEDBACK_CONFIG)
    if not isinstance(saved, dict) or saved.pop("format", None) != FORMAT:
        raise ValueError(f"{path / FEEDBACK_CONFIG} is not a {FORMAT} file")
    saved.pop("files", None)
    conflicts = {k: (v, saved.get(k)) for k, v in options.items() if saved.get(k) != v}
    if conflicts:
        raise ValueError(f"options {conflicts} (given, stored) disagree with the saved wrapper in {path}")
    return saved


def load_weights(model: FeedbackLM, path: Path) -> None:
    """Copy a saved wrapper's feedback weights into ``model``."""
    weights = read_safetensors(path / FEEDBACK_WEIGHTS)
    own = dict(model.mechanism.named_parameters())
    if set(weights) != set(own):
        raise ValueError(f"{path / FEEDBACK_WEIGHTS} holds {sorted(weights)}, expected {sorted(own)}")
    with torch.no_grad():
        for name, p in own.items():
            if weights[name].shape != p.shape:
                raise ValueError(f"{name}: stored shape {tuple(weights[name].shape)}, expected {tuple(p.shape)}")
            p.copy_(weights[name])
