"""Bringing saved runs up to what the current code records, without retraining them."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import load_checkpoint, load_config, load_metrics, save_checkpoint
from ..files import write_bytes_atomic
from .runs import reference_metrics, spec_of
from .store import EVAL_FILE


def record_reference(path: Path) -> dict[str, float]:
    """Add (or refresh) ``eval_float64`` in a saved run's metrics, saved as a new checkpoint version."""
    path = Path(path)
    model, metrics = load_checkpoint(path), load_metrics(path)
    metrics["eval_float64"] = reference_metrics(model, spec_of(path))
    header = load_config(path)[1]
    extra = {k: v for k, v in header.items() if k not in ("format", "package_version", "model")}
    beside = {name: (path / name).read_bytes() for name in ("history.csv", EVAL_FILE) if (path / name).is_file()}
    save_checkpoint(model, path, metrics=metrics, extra=extra)
    for name, data in beside.items():
        write_bytes_atomic(path / name, data)
    return metrics["eval_float64"]
