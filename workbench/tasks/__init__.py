"""Tasks with known latent state, and byte-level text, behind one registry (``get(name, **params)``)."""

from __future__ import annotations

import inspect
import json
from typing import Any

import pandas as pd

from .arith_cot import ANSWER_MARKER, ArithCoT, extract_answer
from .base import Batch, Task
from .probe_tasks import SCRATCH_UPDATES, CompletionTracking, DelayedMemory, MultiRegister, ProbeTask
from .running_sum import RunningSum
from .stream import TrainStream, step_seed
from .text import FINEWEB_EDU, TextTask, iter_hf_documents, load_corpus, stdlib_dir
from .tokenizers import ByteTokenizer, CharTokenizer

REGISTRY: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (ArithCoT, CompletionTracking, DelayedMemory, MultiRegister, RunningSum, TextTask)
}


def names() -> list[str]:
    """The task names, sorted."""
    return sorted(REGISTRY)


def param_defaults(name: str) -> dict[str, Any]:
    """The parameters of ``get(name, ...)``, with defaults."""
    if name not in REGISTRY:
        raise ValueError(f"unknown task {name!r}: must be one of {names()}")
    sig = inspect.signature(REGISTRY[name].__init__)
    return {p.name: p.default for p in sig.parameters.values() if p.name != "self"}


def get(name: str, **params: Any) -> Task:
    """Build a task by name."""
    allowed = param_defaults(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown parameter(s) {unknown}; allowed: {sorted(allowed)}")
    return REGISTRY[name](**params)


def describe() -> pd.DataFrame:
    """One row per task at its defaults, with one decoded example."""
    rows = []
    for name in names():
        task = get(name)
        rows.append({"name": name, "vocab_size": task.vocab_size, "seq_len": task.seq_len,
                     "example": task.sample(1, seed=0).texts[0], "params": json.dumps(task.params)})
    return pd.DataFrame(rows, columns=["name", "vocab_size", "seq_len", "example", "params"])


__all__ = [
    "ANSWER_MARKER", "ArithCoT", "Batch", "ByteTokenizer", "CharTokenizer", "CompletionTracking",
    "DelayedMemory", "FINEWEB_EDU", "MultiRegister", "ProbeTask", "REGISTRY", "RunningSum", "SCRATCH_UPDATES",
    "Task", "TextTask", "TrainStream", "describe", "extract_answer", "get", "iter_hf_documents",
    "load_corpus", "names", "param_defaults", "step_seed", "stdlib_dir",
]
