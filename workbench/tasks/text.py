"""Byte-level text (default: the standard library, real text offline): loss in bits is bits per byte. Directories and
datasets split by a hash of each path or document, so the split never depends on listing order or other files."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..validation import fail
from .base import SPLITS, Batch, Task, check_int, check_n, collate, make_rng
from .tokenizers import ByteTokenizer

FINEWEB_EDU = "HuggingFaceFW/fineweb-edu"
LOCAL_FORMATS = {".parquet": "parquet", ".json": "json", ".jsonl": "json"}
SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}
BOS = ByteTokenizer.bos_id


def stdlib_dir() -> Path:
    """The standard library's source."""
    return Path(sysconfig.get_paths()["stdlib"])


def list_files(root: Path, pattern: str) -> list[str]:
    """Sorted relative paths matching ``pattern``."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        rel = Path(dirpath).relative_to(root)
        found += [(rel / f).as_posix() for f in filenames
                  if fnmatch.fnmatch(f, pattern) and not f.startswith(".")]
    return sorted(found)


def is_val(key: str, val_fraction: float) -> bool:
    """The first 8 bytes of sha256(key) as a fraction of 2**64."""
    h = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")
    return h / 2**64 < val_fraction


def iter_hf_documents(dataset: str = FINEWEB_EDU, config: str | None = None, text_field: str = "text",
                      split: str = "train") -> Iterator[str]:
    """Stream a Hugging Face dataset or local parquet/JSON file."""
    try:
        import datasets
    except ImportError as e:
        raise ImportError("streaming needs `datasets`: pip install datasets") from e
    suffix = Path(dataset).suffix.lower()
    if suffix in LOCAL_FORMATS and Path(dataset).is_file():
        rows = datasets.load_dataset(LOCAL_FORMATS[suffix], data_files=str(dataset), split="train",
                                     streaming=True)
    else:
        rows = datasets.load_dataset(dataset, name=config, split=split, streaming=True)

    def texts() -> Iterator[str]:
        for row in rows:
            if text_field not in row:
                raise ValueError(f"dataset {dataset!r} has no field {text_field!r}; fields: {sorted(row)}")
            yield row[text_field]

    return texts()


def _stream(documents: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    starts = np.cumsum([0] + [len(d) + 1 for d in documents])
    tokens = np.full(starts[-1], BOS, dtype=np.uint16)
    for start, doc in zip(starts, documents):
        tokens[start + 1: start + 1 + len(doc)] = np.frombuffer(doc, dtype=np.uint8)
    return tokens, starts[:-1]


def _byte_split(documents: list[bytes], val_fraction: float) -> dict[str, list[bytes]]:
    cuts = [round(len(d) * (1 - val_fraction)) for d in documents]
    return {"train": [d[:c] for d, c in zip(documents, cuts)],
            "val": [d[c:] for d, c in zip(documents, cuts)]}


@functools.lru_cache(maxsize=4)
def load_corpus(path: str | None = None, pattern: str | None = None, val_fraction: float = 0.1,
                dataset: str | None = None, dataset_config: str | None = None, text_field: str = "text",
                max_bytes: int = 16_000_000) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """split -> (tokens, document offsets), cached."""
    if dataset is not None:
        split: dict[str, list[bytes]] = {"train": [], "val": []}
        total = 0
        for text in iter_hf_documents(dataset, dataset_config, text_field):
            data = text.encode("utf-8")
            split["val" if is_val(text, val_fraction) else "train"].append(data)
            total += len(data)
            if total >= max_bytes:
                break
    else:
        root = stdlib_dir() if path is None else Path(path)
        if root.is_file():
            split = _byte_split([root.read_bytes()], val_fraction)
        else:
            names = list_files(root, pattern or ("*.py" if path is None else "*"))
            if not names:
                raise ValueError(f"text: no file under {str(root)!r} matches pattern {pattern!r}")
            split = {"train": [], "val": []}
            for name in names:
                split["val" if is_val(name, val_fraction) else "train"].append((root / name).read_bytes())
            if not split["train"] or not split["val"]:
                split = _byte_split(split["train"] + split["val"], val_fraction)
    return {s: _stream(split[s]) for s in SPLITS}


class TextTask(Task):
    """Random windows of ``seq_len`` bytes (+1 for targets)."""

    name = "text"
    bytes_per_token = 1

    def __init__(self, path: str | None = None, seq_len: int = 256, val_fraction: float = 0.1,
                 pattern: str | None = None, dataset: str | None = None, dataset_config: str | None = None,
                 text_field: str = "text", max_bytes: int = 16_000_000) -> None:
        if path is not None and dataset is not None:
            raise ValueError(f"text: give path={path!r} or dataset={dataset!r}, not both")
        if path is not None and not Path(path).exists():
            raise ValueError(f"text: path={path!r} is invalid: no such file or directory")
        if path is not None and Path(path).is_file() and Path(path).stat().st_size == 0:
            raise ValueError(f"text: path={path!r} is invalid: the file is empty")
        check_int(self.name, "seq_len", seq_len, 1, 1 << 20)
        check_int(self.name, "max_bytes", max_bytes, 1, 1 << 40)
        fraction = not isinstance(val_fraction, bool) and isinstance(val_fraction, (int, float))
        if not fraction or not 0 < val_fraction < 1:
            raise ValueError(f"text: val_fraction={val_fraction!r} is invalid: must be a number in (0, 1)")
        self.tokenizer = ByteTokenizer()
        self.seq_len = int(seq_len)
        self.params = {"path": None if path is None else str(path), "seq_len": self.seq_len,
                       "val_fraction": float(val_fraction), "pattern": pattern, "dataset": dataset,
                       "dataset_config": dataset_config, "text_field": text_field,
                       "max_bytes": int(max_bytes)}

    def _source(self) -> str:
        p = self.params
        if p["dataset"] is not None:
            return f"dataset={p['dataset']!r}"
        return f"the standard library ({stdlib_dir()})" if p["path"] is None else f"path={p['path']!r}"

    def corpus(self, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
        """(tokens, document offsets) of a split."""
        if split not in SPLITS:
            fail("split", split, f"must be one of {SPLITS}")
        p = {k: v for k, v in self.params.items() if k != "seq_len"}
        return load_corpus(**p)[split]

    def unigram_loss(self, split: str = "val") -> float:
        """Nats per byte of add-one-smoothed training byte frequencies: the line to clear."""
        counts = np.bincount(self.corpus("train")[0], minlength=self.vocab_size).astype(np.float64) + 1.0
        held = np.bincount(self.corpus(split)[0], minlength=self.vocab_size).astype(np.float64)
        held[BOS] = 0.0  # document starts are never a target
        return float(-(held * np.log(counts / counts.sum())).sum() / held.sum())

    def _batch(self, tokens: np.ndarray, doc_starts: np.ndarray, starts: np.ndarray,
               ends: np.ndarray) -> Batch:
        rows = [tokens[s:e].astype(np.int64) for s, e in zip(starts, ends)]
        targets = [np.where(r[1:] == BOS, -1, r[1:]) for r in rows]
        inputs = [r[:-1] for r in rows]
        return collate(inputs, targets, self.tokenizer.pad_id,
                       texts=[self.tokenizer.decode(r) for r in inputs],
                       groups=np.searchsorted(doc_starts, starts, side="right") - 1)

    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        """``n`` windows at random offsets; ``groups``: each window's starting document."""
        check_n(n, self.seq_len)
        rng = make_rng(seed, split)
        tokens, doc_starts = self.corpus(split)
        if len(tokens) < self.seq_len + 1:
            size = len(tokens) - len(doc_starts)  # bytes: every document adds one <bos>
            state = "empty" if size == 0 else f"too short ({size} bytes)"
            raise ValueError(f"text: the {split} split of {self._source()} is {state}: seq_len={self.seq_len} needs "
                             f"at least {self.seq_len + 1} tokens, a <bos> included")
        starts = rng.integers(0, len(tokens) - self.seq_len, size=n)
        return self._batch(tokens, doc_starts, starts, starts + self.seq_len + 1)

    def eval_batches(self, split: str = "val", batch_size: int = 32) -> Iterator[Batch]:
        """Each token after the first predicted once: exact bits per byte."""
        check_n(batch_size, self.seq_len, "batch_size")
        tokens, doc_starts = self.corpus(split)
        starts = np.arange(0, len(tokens) - 1, self.seq_len)
        for i in range(0, len(starts), batch_size):
            s = starts[i: i + batch_size]
            yield self._batch(tokens, doc_starts, s, np.minimum(s + self.seq_len + 1, len(tokens)))
