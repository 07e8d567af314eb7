"""What a path on the command line names, and the data a run is read on."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from .. import schedules
from ..files import write_csv
from .options import parse_key_values

RUN_DIR = "a run directory (train --out DIR)"
CHECKPOINT_FORM = "a checkpoint directory (config.json + model.safetensors)"
RUN_FORMS = f"{RUN_DIR} or {CHECKPOINT_FORM}"


EXACT = schedules.Sequential()  # what a decoder realises: the number a run is judged by


def resolve_checkpoint(path: str, what: str = "CHECKPOINT") -> Path:
    """``path`` itself, or a run directory's ``checkpoint/``."""
    from ..checkpoint import CONFIG, is_checkpoint
    from ..run_dir import CHECKPOINT_DIR
    from ..run_dir import CONFIG_FILE as RUN_CONFIG

    p = Path(path)
    if is_checkpoint(p):
        return p
    if os.path.lexists(p / CHECKPOINT_DIR):  # a run directory: loading says what is wrong with its checkpoint
        return p / CHECKPOINT_DIR
    if p.is_dir() and (p / RUN_CONFIG).is_file():
        raise ValueError(f"{what} {path!r} is a run directory without a checkpoint yet")
    if p.is_dir():
        raise ValueError(f"{what} {path!r} is invalid: it is neither {RUN_DIR} nor {CHECKPOINT_FORM}")
    if os.path.lexists(p):
        raise ValueError(f"{what} {path!r} is invalid: a file; give {RUN_FORMS}")
    raise ValueError(f"{what} {path!r} is invalid: no such directory (missing file {p / CONFIG}); give {RUN_FORMS}")


@dataclasses.dataclass
class Run:
    """A trained model and what its checkpoint recorded about its training."""

    path: str  # as the user gave it
    checkpoint: Path
    model: Any  # GPT
    header: dict[str, Any]
    metrics: dict[str, Any]
    train_config: dict[str, Any]

    @property
    def feedback(self) -> bool:
        return self.model.config.mechanism != "none"

    @property
    def describe(self) -> str:
        c = self.model.config
        return (f"{c.mechanism}, {c.n_layer} layer{'s' * (c.n_layer != 1)} x {c.n_embd} wide, seq_len {c.seq_len}, "
                f"{self.model.num_params():,} parameters")

    def training_schedule(self) -> schedules.Schedule | None:
        """The schedule the run trained under, if recorded."""
        from ..train_config import TrainConfig

        if not self.train_config:
            return None
        try:
            return TrainConfig.from_dict(self.train_config).schedule
        except (TypeError, ValueError):
            return None

    def counters(self) -> dict[str, float | None]:
        """Training steps, tokens and FLOPs: from the metrics, a recipe's ``train`` entry or history.csv."""
        for source in (self.metrics, self.metrics.get("train")):
            if isinstance(source, dict) and source.get("step") is not None and source.get("flops") is not None:
                return {k: source.get(k) for k in ("step", "tokens", "flops")}
        for where in (self.checkpoint, self.checkpoint.parent):
            history = where / "history.csv"
            if history.is_file():
                rows = pd.read_csv(history)
                if len(rows) and {"step", "flops"} <= set(rows.columns):
                    last = rows.iloc[-1]
                    tokens = last.get("tokens")
                    return {"step": int(last["step"]), "tokens": int(tokens) if pd.notna(tokens) else None,
                            "flops": float(last["flops"])}
        return {"step": None, "tokens": None, "flops": None}

    def recorded_task(self) -> tuple[str | None, dict[str, Any]]:
        name = self.header.get("task") or self.train_config.get("task")
        params = self.header.get("task_params") or self.train_config.get("task_params") or {}
        return name, dict(params)


def load_run(path: str, device: str = "cpu", what: str = "RUN") -> Run:
    from ..checkpoint import load_checkpoint, load_config, load_metrics

    checkpoint = resolve_checkpoint(path, what)
    model = load_checkpoint(checkpoint, device=device_named(device))
    header = load_config(checkpoint)[1]
    metrics = load_metrics(checkpoint)
    train_config = header.get("train_config") or metrics.get("train_config") or {}
    return Run(path, checkpoint, model, header, metrics, train_config if isinstance(train_config, dict) else {})


def device_named(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {name!r} is invalid: no CUDA here; use cpu or auto")
    return name


def heldout_task(run: Run, params: dict[str, Any] | None = None, text: str | None = None):
    """The run's recorded task (``params`` override) or, for byte-level models, the file ``text``."""
    from .. import tasks

    name, recorded = run.recorded_task()
    if text is not None:
        if run.model.config.vocab_size != tasks.ByteTokenizer.vocab_size:
            raise ValueError(f"--text {text!r} is invalid: {run.path} is not byte-level; use --task-params")
        if not Path(text).exists():
            raise ValueError(f"--text {text!r} is invalid: no such file or directory")
        kept = {k: v for k, v in recorded.items() if k in ("seq_len", "val_fraction")} if name == "text" else {}
        name, recorded = "text", {"seq_len": run.model.config.seq_len, **kept, "path": str(text)}
    if name is None:
        raise ValueError(f"{run.path} records no task: pass --text PATH")
    merged = {**recorded, **(params or {})}
    try:
        task = tasks.get(name, **merged)
    except (TypeError, ValueError) as e:
        hint = "--text PATH or " if name == "text" else ""
        raise ValueError(f"{run.path}: its task {name} {merged} cannot be rebuilt ({e}); pass {hint}--task-params "
                         "JSON") from None
    if task.vocab_size != run.model.config.vocab_size:
        raise ValueError(f"{run.path}: task {name} has vocab {task.vocab_size}, the model "
                         f"{run.model.config.vocab_size}")
    return task


def checkpoint_task(run: Run, name: str | None, params: list[str] | None):
    """The task a checkpoint recorded, unless named."""
    from .. import tasks

    given = parse_key_values(params, "--task-param")
    if name is None:
        name, recorded = run.recorded_task()
        if name is None:
            raise ValueError(f"{run.checkpoint} records no task: pass --task NAME")
        given = {**recorded, **given}
    return tasks.get(name, **given)


def is_text(task) -> bool:
    """Byte-level text: bits per byte mean something, answer accuracy does not."""
    return getattr(task, "bytes_per_token", None) is not None


def metric_names(task) -> tuple[str, ...]:
    return ("loss", "bpb", "accuracy") if is_text(task) else ("loss", "accuracy", "answer_accuracy")


HEADERS = {"loss": "loss", "bpb": "bits/byte", "accuracy": "accuracy", "answer_accuracy": "answer acc"}


def describe_task(task, split: str, n: int, seed: int) -> str:
    """``text(seq_len=32): 256 examples of the val split (seed 0)``: non-default parameters only."""
    from ..tasks import param_defaults

    defaults = param_defaults(task.name)
    params = ", ".join(f"{k}={v}" for k, v in task.params.items() if k not in defaults or v != defaults[k])
    return f"{task.name}{f'({params})' if params else ''}: {n} examples of the {split} split (seed {seed})"


def loss_unit(task) -> str:
    return "nats/byte" if is_text(task) else "nats/token"


def tokenizer_of(run: Run):
    """Its recorded task's tokenizer, else the byte or char one matching its vocabulary."""
    from .. import tasks

    name, _ = run.recorded_task()
    if name in tasks.REGISTRY:
        tokenizer = tasks.get(name).tokenizer
        if tokenizer.vocab_size == run.model.config.vocab_size:
            return tokenizer
    for tokenizer in (tasks.ByteTokenizer(), tasks.CharTokenizer()):
        if tokenizer.vocab_size == run.model.config.vocab_size:
            return tokenizer
    raise ValueError(f"{run.path}: no tokenizer has vocab {run.model.config.vocab_size}")


def encode_prompt(tokenizer, prompt: bytes, flag: str = "--prompt") -> list[int]:
    """Prompt bytes as ids; byte-level text opens with ``<bos>`` as training documents do."""
    bos = getattr(tokenizer, "bos_id", None)
    if bos is not None:
        return [bos, *tokenizer.encode_bytes(prompt).tolist()]
    try:
        ids = tokenizer.encode(prompt.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{flag} is invalid: byte {prompt[e.start:e.start + 1]!r} is not in the {tokenizer.name} "
                         f"vocabulary") from None
    except ValueError as e:
        raise ValueError(f"{flag} is invalid: {e} (printable ASCII and newline)") from None
    if not ids:
        raise ValueError(f"{flag} is invalid: empty")
    return ids


def read_labels(path: str) -> list[int]:
    """``--labels``: one integer per line (blank lines skipped)."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--labels {path!r} is invalid: {getattr(e, 'strerror', None) or e}") from None
    labels = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                labels.append(int(line))
            except ValueError:
                raise ValueError(f"--labels {path!r} is invalid: line {number} {line.strip()!r} is not an "
                                 "integer") from None
    if not labels:
        raise ValueError(f"--labels {path!r} is invalid: no labels")
    return labels


def probe_source(task, n: int | None, labels_path: str | None, seed: int, out: str):
    """(task or batch, n, labels or None); text's windows go to ``OUT/probe_examples.csv`` to be labelled."""
    labels = None if labels_path is None else read_labels(labels_path)
    n = n if n is not None else len(labels) if labels is not None else 400
    if labels is not None and len(labels) != n:
        raise ValueError(f"--labels {labels_path!r} holds {len(labels)} labels, --n is {n}: must match (or omit --n)")
    if not is_text(task):
        return task, n, labels
    batch = text_windows(task, n, seed)
    examples = Path(out) / "probe_examples.csv"
    Path(out).mkdir(parents=True, exist_ok=True)
    write_csv(examples, pd.DataFrame({"example": range(n), "text": batch.texts, "label": labels}))
    if labels is None:
        raise ValueError(f"--labels is required: task {task.name} has none; label the {n} examples in {examples}")
    return batch, None, labels


def text_windows(task, n: int, seed: int):
    """``n`` non-overlapping windows of the val split, each its own CV group, read at its last token."""
    from ..tasks.base import make_rng

    tokens, doc_starts = task.corpus("val")
    count = max(len(tokens) - 1, 0) // task.seq_len  # whole windows: seq_len inputs and their targets
    if n > count:
        raise ValueError(f"--n {n} is invalid: must be an int in [1, {count}], the val split's windows")
    starts = np.sort(make_rng(seed, "val").choice(count, size=n, replace=False)) * task.seq_len
    batch = task._batch(tokens, doc_starts, starts, starts + task.seq_len + 1)  # the task's own windows
    return dataclasses.replace(batch, groups=torch.arange(n), label_positions=batch.lengths - 1)
