"""Checkpoints under concurrency and kills, in separate (forked) processes, bounded in counts.

- A writer alternating two models (widths 32 and 64, every weight 1.0 and 2.0) while readers load
  in a loop: every load must return one whole model (its width and its value agree) and nothing
  may raise. Run with the atomic exchange and with the two-rename fallback.
- A saver SIGKILLed at random points of its saves, and exactly after its swap / between its two
  renames: after every kill the path loads as the old or the new version, and the next save leaves
  nothing behind.

The processes are forked from the test (torch and the package are imported once, not per process).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import traceback
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench import checkpoint, store
from workbench.checkpoint import load_checkpoint, save_checkpoint

VALUE_OF_WIDTH = {32: 1.0, 64: 2.0}


def _models() -> dict[float, wb.GPT]:
    models = {}
    for width, value in VALUE_OF_WIDTH.items():
        model = wb.build_model(wb.ModelConfig(vocab_size=16, n_layer=1, n_head=2, n_embd=width, seq_len=8))
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)
        models[value] = model
    return models


MODELS = _models()


def save(path, i: int) -> None:
    value = 1.0 + i % 2
    save_checkpoint(MODELS[value], path, metrics={"value": value, "i": i})


def verdict(path) -> str:
    """"ok" when a load gives one whole model (its width and its value agree) and one read of config,
    weights and metrics gives files of one version; "mixed" otherwise."""
    model = load_checkpoint(path)
    value = VALUE_OF_WIDTH[model.config.n_embd]
    files = checkpoint.read_checkpoint(path, ("config.json", "model.safetensors", "metrics.json"))
    same = (files["metrics.json"]["value"] == VALUE_OF_WIDTH[files["config.json"]["model"]["n_embd"]]
            == float(files["model.safetensors"]["wte.weight"][0, 0]))
    return "ok" if same and all(bool((p == value).all()) for p in model.parameters()) else "mixed"


def fork(fn, *args) -> tuple[int, int]:
    """Run ``fn(*args)`` in a forked child; its JSON result comes back through a pipe (``collect``)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 0
        try:
            os.close(read)
            os.write(write, json.dumps(fn(*args)).encode())
        except BaseException as e:  # noqa: BLE001 - report anything, then leave
            os.write(write, json.dumps({"crash": f"{type(e).__name__}: {e}"}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def collect(pid: int, read: int) -> dict:
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


SAVES, LOADS = 40, 40  # counts, not seconds: the same stress on a fast or a loaded machine
CAP = 1000  # times those counts: a partner that died must not leave the others looping


def _writer(path: str, marks: str) -> dict:
    """Saves at least ``SAVES`` versions, and on until both readers have made their ``LOADS``, so every load
    of theirs overlaps the version swaps."""
    i = 0
    try:
        while (i < SAVES or len(list(Path(marks).glob("reader-*"))) < 2) and i < CAP * SAVES:
            save(path, i)
            i += 1
    finally:
        (Path(marks) / "writer").touch()
    return {"saves": i}


def _reader(path: str, marks: str, k: int) -> dict:
    """Loads while the writer swaps versions in: at least ``LOADS``, and on until the writer has finished."""
    counts = {"loads": 0, "ok": 0, "mixed": 0, "errors": 0, "first_error": None}
    try:
        while (counts["loads"] < LOADS or not (Path(marks) / "writer").exists()) and counts["loads"] < CAP * LOADS:
            counts["loads"] += 1
            try:
                counts[verdict(path)] += 1
            except Exception as e:  # any error at all breaks the guarantee
                counts["errors"] += 1
                counts["first_error"] = counts["first_error"] or f"{type(e).__name__}: {e}"
            if counts["loads"] == LOADS:
                (Path(marks) / f"reader-{k}").touch()
    finally:
        (Path(marks) / f"reader-{k}").touch()
    return counts


@pytest.fixture(params=[True, False], ids=["exchange", "two_renames"])
def exchange(request, monkeypatch) -> bool:
    """Both ways of swapping a version in: the atomic exchange, and the fallback where it is missing."""
    if not request.param:
        monkeypatch.setattr(store, "_exchange", lambda a, b: False)
    return request.param


def test_concurrent_loads_never_see_a_mixed_or_missing_model(tmp_path, exchange):
    path, marks = str(tmp_path / "ck"), tmp_path.parent / f"{tmp_path.name}-marks"  # marks outside the checked dir
    marks.mkdir()
    save(path, 0)
    children = [fork(_writer, path, str(marks)), fork(_reader, path, str(marks), 0), fork(_reader, path, str(marks), 1)]
    writer, *readers = [collect(*c) for c in children]
    loads = sum(r.get("loads", 0) for r in readers)
    print(f"stress ({'exchange' if exchange else 'two renames'}): {writer} , {loads} loads, "
          f"{sum(r.get('ok', 0) for r in readers)} whole, {sum(r.get('mixed', 0) for r in readers)} mixed, "
          f"{sum(r.get('errors', 0) for r in readers)} errors")
    assert writer.get("saves", 0) >= SAVES and loads >= 2 * LOADS, (writer, readers)
    assert all(r.get("mixed") == 0 and r.get("errors") == 0 for r in readers), readers
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def _save_forever(path: str, first: int) -> None:
    i = first
    while True:
        save(path, i)
        i += 2


def _die_after_swap() -> None:
    """Make this process SIGKILL itself right after its save swaps the new version in (the exchange),
    or between its two renames (the fallback): the worst moments for what is on disk."""
    rename, exchange = os.rename, store._exchange

    def rename_then_die(src, dst):
        rename(src, dst)
        if os.path.basename(str(dst)).startswith(".ck.old-"):
            os.kill(os.getpid(), signal.SIGKILL)

    def exchange_then_die(a, b):
        if exchange(a, b):
            os.kill(os.getpid(), signal.SIGKILL)
        return False

    os.rename, store._exchange = rename_then_die, exchange_then_die


def _victim(path: str, first: int, between_renames: bool) -> None:
    if between_renames:
        _die_after_swap()
    _save_forever(path, first)


@pytest.mark.parametrize("between_renames", [False, True], ids=["random", "between_renames"])
def test_kill_minus_9_during_saves_leaves_a_loadable_checkpoint_and_no_leak(tmp_path, exchange, between_renames):
    path, rng = str(tmp_path / "ck"), random.Random(0)
    save(path, 0)
    kills = 4 if between_renames else 12
    outcomes, left = [], set()
    for k in range(kills):
        pid, read = fork(_victim, path, 1 + k, between_renames)
        if not between_renames:
            time.sleep(rng.uniform(0.0, 0.15))
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(read)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        try:
            outcomes.append(verdict(path))
        except Exception as e:
            outcomes.append(f"{type(e).__name__}: {e}")
        left |= {name.split("-")[0] for name in os.listdir(tmp_path)}
    print(f"kill -9 ({'between renames' if between_renames else 'random'}, "
          f"{'exchange' if exchange else 'two renames'}): {outcomes}; names left before the next save: {left}")
    assert outcomes == ["ok"] * kills
    if between_renames and not exchange:
        assert ".ck.old" in left  # really killed with the old version set aside
    save(path, 10_000)
    assert sorted(os.listdir(tmp_path)) == ["ck"] and verdict(path) == "ok"


def _counted_writer(path: str, first: int, saves: int) -> dict:
    counts = {"saves": 0, "errors": 0, "first_error": None}
    for i in range(first, first + saves):
        try:
            save(path, i)
            counts["saves"] += 1
        except Exception:  # any error at all: another saver must never make a save fail
            counts["errors"] += 1
            counts["first_error"] = counts["first_error"] or traceback.format_exc(limit=-3)
    return counts


def _counted_reader(path: str, loads: int) -> dict:
    counts = {"loads": loads, "ok": 0, "mixed": 0, "errors": 0, "first_error": None}
    for _ in range(loads):
        try:
            counts[verdict(path)] += 1
        except Exception as e:
            counts["errors"] += 1
            counts["first_error"] = counts["first_error"] or f"{type(e).__name__}: {e}"
    return counts


def test_concurrent_savers_never_fail_and_readers_never_see_a_mix(tmp_path, exchange):
    """Four savers on one path (a temporary is locked before any clean-up can see it) and two readers."""
    path = str(tmp_path / "ck")
    save(path, 0)
    children = [fork(_counted_writer, path, 1000 * k, 15) for k in range(4)]
    children += [fork(_counted_reader, path, 30) for _ in range(2)]
    *writers, r1, r2 = [collect(*c) for c in children]
    print(f"concurrent savers ({'exchange' if exchange else 'two renames'}): {writers}, readers {r1}, {r2}")
    assert all(w.get("saves") == 15 and w.get("errors") == 0 for w in writers), writers
    assert all(r.get("mixed") == 0 and r.get("errors") == 0 for r in (r1, r2)), (r1, r2)
    save(path, 1)
    assert sorted(os.listdir(tmp_path)) == ["ck"] and verdict(path) == "ok"


def test_another_savers_clean_up_between_creating_and_locking_a_temporary_removes_nothing(tmp_path, monkeypatch):
    """The race behind about 1 % of concurrent saves failing: a clean-up running right after a saver made its
    temporary, before it was locked. Now a save locks its temporary before clean-ups would touch it, and
    starts again if one removed it in that instant."""
    path = tmp_path / "ck"
    save(path, 0)
    mkdtemp, calls = store.tempfile.mkdtemp, []

    def mkdtemp_then_clean_up(*args, **kwargs):
        made = mkdtemp(*args, **kwargs)
        if not calls:
            store._collect(path)  # what a concurrent saver's clean-up does at the worst moment
        calls.append(made)
        return made

    monkeypatch.setattr(store.tempfile, "mkdtemp", mkdtemp_then_clean_up)
    save(path, 1)
    assert verdict(path) == "ok" and sorted(os.listdir(tmp_path)) == ["ck"]


def test_another_savers_clean_up_between_the_two_renames_leaves_the_set_aside_version_to_load(tmp_path, monkeypatch):
    """The race behind loads failing while four savers share a path without the atomic exchange (CI, 9 of 60
    loads): between a save's two renames the set-aside old version is the only one there is, and another
    saver's clean-up deleted it. Now the saver holds it locked until its new version is in place."""
    path = tmp_path / "ck"
    save(path, 0)
    monkeypatch.setattr(store, "_exchange", lambda a, b: False)
    rename, seen = os.rename, []

    def rename_then_clean_up_and_load(src, dst):
        rename(src, dst)
        if os.path.basename(str(dst)).startswith(".ck.old-"):
            store._collect(path)  # what a concurrent saver's clean-up does at the worst moment
            seen.append(verdict(path))  # and a concurrent load, in that same instant

    monkeypatch.setattr(store.os, "rename", rename_then_clean_up_and_load)
    save(path, 1)
    monkeypatch.setattr(store.os, "rename", rename)
    assert seen == ["ok"] and verdict(path) == "ok"
    assert load_checkpoint(path).config.n_embd == 64 and sorted(os.listdir(tmp_path)) == ["ck"]
