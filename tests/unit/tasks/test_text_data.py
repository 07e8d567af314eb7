"""Byte-level text: tokenizer and loader round trips, the hash split, windows, the `datasets` loader."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import workbench.tasks as tasks
from workbench.tasks.text import list_files, stdlib_dir

torch.set_num_threads(1)
BOS = tasks.ByteTokenizer.bos_id


def documents(stream: np.ndarray) -> list[bytes]:
    """Split a ``<bos> doc <bos> doc`` stream back into documents."""
    cuts = np.flatnonzero(stream == BOS).tolist() + [len(stream)]
    return [stream[a + 1: b].astype(np.uint8).tobytes() for a, b in zip(cuts[:-1], cuts[1:])]


def in_val(rel: str, fraction: float) -> bool:
    """The test's own statement of the split rule."""
    return int(hashlib.sha256(rel.encode()).hexdigest()[:16], 16) < fraction * 2**64


def write_files(root: Path, names: list[str]) -> dict[str, bytes]:
    contents = {}
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        words = "caf\u00e9 " * (len(name) % 5)
        contents[name] = f"# file {name}\n{words}x = {len(name)}\n".encode()
        path.write_bytes(contents[name])
    return contents


def test_byte_tokenizer_round_trip() -> None:
    tok = tasks.ByteTokenizer()
    text = "na\u00efve \u2603 bytes\n\x00\xff"
    ids = tok.encode(text)
    assert len(ids) == len(text.encode()) and max(ids) < 256
    assert tok.decode(ids) == text and tok.decode(torch.tensor([tok.bos_id] + ids + [tok.pad_id])) == text
    assert tok.vocab_size == 258 and tok.token_bytes.sum() == 256


def test_directory_split_by_path_hash_round_trips(tmp_path: Path) -> None:
    names = [f"pkg{i % 3}/mod_{i}.py" for i in range(40)] + ["notes.txt", ".hidden.py"]
    contents = write_files(tmp_path / "a", names)
    task = tasks.get("text", path=str(tmp_path / "a"), pattern="*.py", seq_len=16, val_fraction=0.25)
    train, val = documents(task.corpus("train")[0]), documents(task.corpus("val")[0])
    kept = sorted(n for n in names if n.endswith(".py") and not n.startswith("."))
    assert sorted(train + val) == sorted(contents[n] for n in kept)  # every file exactly once
    assert val == [contents[n] for n in kept if in_val(n, 0.25)] and 0 < len(val) < len(kept)
    # the same files among others, written in another order, land on the same side
    write_files(tmp_path / "b", list(reversed(names)) + ["pkg9/extra_1.py", "pkg9/extra_2.py"])
    other = tasks.get("text", path=str(tmp_path / "b"), pattern="*.py", seq_len=16, val_fraction=0.25)
    assert set(val) <= set(documents(other.corpus("val")[0]))
    assert set(train) <= set(documents(other.corpus("train")[0]))


def test_single_file_is_split_by_bytes(tmp_path: Path) -> None:
    data = bytes(range(256)) * 8
    (tmp_path / "one.bin").write_bytes(data)
    task = tasks.get("text", path=str(tmp_path / "one.bin"), seq_len=32)
    train, val = documents(task.corpus("train")[0]), documents(task.corpus("val")[0])
    assert train[0] + val[0] == data and len(val[0]) == round(0.1 * len(data))


def test_windows_targets_and_determinism(tmp_path: Path) -> None:
    write_files(tmp_path, [f"f{i}.txt" for i in range(30)])
    task = tasks.get("text", path=str(tmp_path), seq_len=24, val_fraction=0.3)
    batch = task.sample(16, seed=0)
    assert batch.tokens.shape == batch.targets.shape == (16, 24) and (batch.lengths == 24).all()
    nxt = batch.tokens[:, 1:]
    assert torch.equal(batch.targets[:, :-1], torch.where(nxt == BOS, -1, nxt))
    assert (batch.targets[batch.mask] < 256).all() and batch.targets.min() >= -1
    assert batch.texts == [task.tokenizer.decode(row) for row in batch.tokens]
    assert task.sample(16, seed=0).texts == batch.texts and task.sample(16, seed=1).texts != batch.texts
    assert task.bytes_per_token == 1 and task.vocab_size == 258 and task.seq_len == 24
    stream, doc_starts = task.corpus("train")
    assert all(d == 0 or stream[doc_starts[d]] == BOS for d in batch.groups.tolist())


def test_eval_batches_predict_every_token_once(tmp_path: Path) -> None:
    write_files(tmp_path, [f"f{i}.txt" for i in range(12)])
    task = tasks.get("text", path=str(tmp_path), seq_len=10, val_fraction=0.5)
    stream = task.corpus("val")[0].astype(np.int64)
    targets = torch.cat([b.targets[b.mask] for b in task.eval_batches("val", batch_size=3)])
    expected = stream[1:][stream[1:] != BOS]
    assert targets.tolist() == expected.tolist()


def test_stdlib_is_the_default_corpus() -> None:
    task = tasks.get("text")
    assert task.params["path"] is None and task.seq_len == 256
    names = list_files(stdlib_dir(), "*.py")
    assert "os.py" in names and not any("site-packages" in n for n in names)
    batch = task.sample(2, seed=0, split="val")
    assert batch.tokens.shape == (2, 256)
    n_val = sum(in_val(n, 0.1) for n in names)
    assert len(documents(task.corpus("val")[0])) == n_val


def test_text_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(f"path={str(tmp_path / 'missing')!r}")):
        tasks.get("text", path=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"path=.*dataset='x\.parquet'"):
        tasks.get("text", path=str(tmp_path), dataset="x.parquet")
    with pytest.raises(ValueError, match="val_fraction=1.5"):
        tasks.get("text", val_fraction=1.5)
    (tmp_path / "tiny.txt").write_bytes(b"0123456789" * 3)
    with pytest.raises(ValueError, match=r"tiny\.txt.*seq_len=64"):
        tasks.get("text", path=str(tmp_path / "tiny.txt"), seq_len=64).sample(1, seed=0)


def test_an_empty_file_is_refused_on_construction_and_a_short_one_when_sampled(tmp_path: Path) -> None:
    """An empty file fails where it is named, not later as a split that "holds 1 tokens"."""
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=re.escape(f"path={str(empty)!r}")):
        tasks.get("text", path=str(empty), seq_len=8)
    short = tmp_path / "short.txt"
    short.write_bytes(b"0123456789")
    task = tasks.get("text", path=str(short), seq_len=8)  # the train split (9 bytes) is long enough
    assert task.sample(1, seed=0).tokens.shape == (1, 8)
    with pytest.raises(ValueError, match=re.escape(f"path={str(short)!r}")):
        task.sample(1, seed=0, split="val")
    (tmp_path / "blank").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "blank" / name).write_bytes(b"")
    with pytest.raises(ValueError, match="seq_len=8"):
        tasks.get("text", path=str(tmp_path / "blank"), seq_len=8).sample(1, seed=0)


def test_a_summary_of_text_has_no_answer_accuracy(tmp_path: Path) -> None:
    """A window of text has no answer: its summary leaves answer_accuracy out (it read 0.0); a task of answers
    (no bytes_per_token) keeps it, and every other number is the same."""
    from workbench import ModelConfig, build_model
    from workbench.evaluation import per_example_metrics, summarize

    (tmp_path / "a.txt").write_bytes(b"hello world " * 50)
    text = tasks.get("text", path=str(tmp_path / "a.txt"), seq_len=16)
    model = build_model(ModelConfig(vocab_size=text.vocab_size, seq_len=16, n_layer=1, n_head=1, n_embd=16))
    frame = per_example_metrics(model, text.sample(4, seed=0, split="val"))
    on_text, answers = summarize(frame, text.bytes_per_token), summarize(frame)
    assert set(on_text) == {"loss", "bpb", "accuracy"}
    assert answers["answer_accuracy"] == frame["answer_correct"].mean()
    assert {k: answers[k] for k in on_text} == on_text


def test_missing_datasets_gives_a_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match="pip install datasets"):
        tasks.iter_hf_documents("HuggingFaceFW/fineweb-edu")


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_datasets_loader_round_trips_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             suffix: str) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")  # no lock files in ~/.cache
    docs = [f"Document {i}: \u00e9t\u00e9 {'word ' * i}." for i in range(50)]
    path = tmp_path / f"docs{suffix}"
    if suffix == ".parquet":
        pd = pytest.importorskip("pandas")
        pytest.importorskip("pyarrow")
        pd.DataFrame({"text": docs, "id": range(50)}).to_parquet(path)
    else:
        path.write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    assert list(tasks.iter_hf_documents(str(path))) == docs
    task = tasks.get("text", dataset=str(path), seq_len=16, val_fraction=0.2)
    train, val = documents(task.corpus("train")[0]), documents(task.corpus("val")[0])
    assert val == [d.encode() for d in docs if in_val(d, 0.2)]
    assert sorted(train + val) == sorted(d.encode() for d in docs)
    assert task.sample(4, seed=0).tokens.shape == (4, 16)
    capped = tasks.get("text", dataset=str(path), max_bytes=100)
    assert sum(len(d) for s in ("train", "val") for d in documents(capped.corpus(s)[0])) < 200
    with pytest.raises(ValueError, match="'body'"):
        tasks.get("text", dataset=str(path), text_field="body").corpus()
