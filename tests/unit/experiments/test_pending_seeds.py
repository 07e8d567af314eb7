"""tools/pending_seeds.py carries fbt_text's pre-registered seeds across sessions: what it packs, a fresh
machine unpacks to the same files, a run further along here is never replaced, and it lands nothing early."""

from __future__ import annotations

import tarfile

import pytest

from tools import pending_seeds as ps


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.setattr(ps, "WORK", tmp_path / "work")
    monkeypatch.setattr(ps, "ARCHIVE", tmp_path / "archive" / "pending_seeds.tar")
    (tmp_path / "archive").mkdir()
    return tmp_path


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_archive_holds_finished_runs_whole_and_only_what_resumes_an_unfinished_one(work):
    done, running = (s.name for s in ps.pending()[:2])
    (ps.finished(done) / "checkpoint").mkdir(parents=True)
    (ps.finished(done) / "checkpoint" / "model.safetensors").write_bytes(b"trained")
    (ps.finished(done) / "metrics.json").write_text("{}")
    (ps.resumable(running) / "checkpoint").mkdir(parents=True)
    (ps.resumable(running) / "checkpoint" / "model.safetensors").write_bytes(b"step 200")
    (ps.resumable(running) / "history.csv").write_text("step\n200\n")
    (ps.resumable(running) / "train_config.json").write_text("{}")
    (ps.resumable(running) / "scratch.bin").write_bytes(b"not needed to resume")
    assert ps.pack() == [f"{done} (trained)", f"{running} (resumable)"]
    with tarfile.open(ps.ARCHIVE) as tar:
        assert {ps.run_of(m.name) for m in tar.getmembers()} == {done, running}
    packed = _files(ps.WORK)
    del packed[f"scratch/fbt_text/{running}/scratch.bin"]

    ps.WORK.rename(work / "old")  # a fresh machine: nothing under runs/
    assert ps.unpack() == sorted([done, running])
    assert _files(ps.WORK) == packed
    (ps.resumable(running) / "history.csv").write_text("step\n400\n")  # trained further here
    assert ps.unpack() == [] and (ps.resumable(running) / "history.csv").read_text() == "step\n400\n"


def test_nothing_lands_before_every_pre_registered_run_is_trained(work):
    (ps.finished(ps.pending()[0].name)).mkdir(parents=True)
    with pytest.raises(SystemExit, match=ps.pending()[1].name):
        ps.land()
    assert ps.pack() == [f"{ps.pending()[0].name} (trained)"]
