"""Run directories: one trainer at a time, resume by resolved path, and nothing silent or destructive
when the history, the state file or the config on disk is missing or wrong."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest

from workbench.checkpoint import CheckpointError
from workbench.cli import main
from workbench.experiments.store import same_trajectory
from workbench.run_dir import LOCK_FILE
from workbench.train import train
from workbench.train_config import TrainConfig

TINY = ["--task", "running_sum", "--task-param", "p=5", "--task-param", "length=8", "--n-layer", "1",
        "--n-head", "2", "--n-embd", "16", "--batch-size", "4", "--eval-size", "4", "--log-every", "1",
        "--no-progress"]


def tiny(out, **changes) -> TrainConfig:
    base = dict(task="running_sum", task_params={"p": 5, "length": 8}, model={"n_layer": 1, "n_head": 2, "n_embd": 16},
                steps=3, batch_size=4, eval_size=4, log_every=1, progress=False, out_dir=str(out))
    return TrainConfig(**{**base, **changes})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    train(tiny(out))
    return out


@pytest.fixture
def run(finished, tmp_path):
    """A copy of a finished 3-step run directory (its stored out_dir pointed at the copy)."""
    out = shutil.copytree(finished, tmp_path / "run")
    stored = json.loads((out / "train_config.json").read_text())
    (out / "train_config.json").write_text(json.dumps({**stored, "out_dir": str(out)}))
    return out


def test_a_second_trainer_on_the_same_directory_fails_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "run"
    first = os.fork()
    if first == 0:  # the first trainer, in its own process
        code = 1
        try:
            code = main(["train", *TINY, "--steps", "200", "--lr", "0.001", "--out", str(out)])  # outlasts the second
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while f"pid {first} " not in ((out / LOCK_FILE).read_text() if (out / LOCK_FILE).exists() else ""):
        assert time.monotonic() < deadline, "the first trainer never took the directory"
        time.sleep(0.01)
    second = main(["train", *TINY, "--steps", "20", "--lr", "0.002", "--out", str(out)])
    err = capsys.readouterr().err
    _, status = os.waitpid(first, 0)
    assert second == 2 and f"is in use by another trainer (pid {first} on " in err
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    rows = (out / "history.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == [str(s) for s in range(1, 201)]  # one run's rows, in order
    stored = json.loads((out / "train_config.json").read_text())
    saved = json.loads((out / "checkpoint" / "config.json").read_text())["train_config"]
    assert stored["lr"] == saved["lr"] == 0.001
    assert not (out / LOCK_FILE).exists()


@pytest.mark.parametrize("spelling", ["./run", "run/", "absolute"])
def test_resume_accepts_the_same_directory_however_it_is_spelled(run, monkeypatch, spelling):
    monkeypatch.chdir(run.parent)
    out = str(run.resolve()) if spelling == "absolute" else spelling
    result = train(tiny(out, resume=True))
    assert list(result.history["step"]) == [1, 2, 3] and result.metrics["step"] == 3


def test_resume_from_another_working_directory_or_after_a_move_is_the_same_run(run, monkeypatch, tmp_path):
    """A first command run in run.parent stored out_dir="run"; the run is where its config is, however reached."""
    stored = json.loads((run / "train_config.json").read_text())
    (run / "train_config.json").write_text(json.dumps({**stored, "out_dir": "run"}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert train(tiny(os.path.relpath(run, elsewhere), resume=True)).metrics["step"] == 3
    moved = tmp_path / "moved"
    shutil.move(str(run), moved)
    assert train(tiny(str(moved), resume=True)).metrics["step"] == 3
    with pytest.raises(ValueError, match=re.escape(str(moved)) + r".*\['lr'\]"):  # what the run is still counts
        train(tiny(str(moved), resume=True, lr=0.5))


def test_the_recipe_runner_takes_a_moved_run_directory_for_the_same_run(run, tmp_path):
    """The runner checks a trainer directory's stored config against its spec before resuming it, and deletes a
    directory that describes another run: a study's runs moved between folders or machines must still match."""
    stored = json.loads((run / "train_config.json").read_text())
    cfg = TrainConfig.from_dict(stored).replace(out_dir=str(tmp_path / "moved"))
    assert same_trajectory(stored, cfg)
    assert not same_trajectory(stored, cfg.replace(lr=stored["lr"] * 2))


def test_resume_refuses_history_without_a_usable_checkpoint(run):
    shutil.rmtree(run / "checkpoint")
    history = (run / "history.csv").read_bytes()
    with pytest.raises(ValueError, match="history.csv.*" + re.escape(str(run / "checkpoint"))):
        train(tiny(run, resume=True))
    assert (run / "history.csv").read_bytes() == history


@pytest.mark.parametrize("state,manifest,message", [
    # without a manifest nothing vouches for the state file: the resume is refused before its counters are read
    ({"step": -5, "tokens": 0, "flops": 0.0, "seconds": 0.0}, False, "manifest.json"),
    ({"tokens": 0}, False, "manifest.json"),
    ({"step": 99, "tokens": 0, "flops": 0.0, "seconds": 0.0}, False, "manifest.json"),
    ({"step": -5, "tokens": 0, "flops": 0.0, "seconds": 0.0}, True, "train_state.json.*manifest"),
    (None, True, "missing.*train_state.json"),
])
def test_a_bad_state_file_is_named_and_never_truncates_history(run, state, manifest, message):
    if state is None:
        (run / "checkpoint" / "train_state.json").unlink()
    else:
        (run / "checkpoint" / "train_state.json").write_text(json.dumps(state))
    if not manifest:  # a checkpoint whose manifest was deleted
        (run / "checkpoint" / "manifest.json").unlink()
    history = (run / "history.csv").read_bytes()
    with pytest.raises(CheckpointError, match=message):
        train(tiny(run, resume=True))
    assert (run / "history.csv").read_bytes() == history


@pytest.mark.parametrize("content,message", [(None, "missing.*train_config.json"),
                                             ("{not json", "train_config.json.*JSON"),
                                             ('{"lr": -1}', "train_config.json.*lr=-1"),
                                             ("[1, 2]", "train_config.json.*TrainConfig")])
def test_a_missing_or_garbage_train_config_is_named_on_resume(run, content, message):
    if content is None:
        (run / "train_config.json").unlink()
    else:
        (run / "train_config.json").write_text(content)
    with pytest.raises(CheckpointError, match=message):
        train(tiny(run, resume=True))


def test_out_pointing_at_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("precious")
    assert main(["train", *TINY, "--steps", "1", "--out", str(tmp_path / "file")]) == 2
    assert "TrainConfig.out_dir=" in (err := capsys.readouterr().err) and "exists and is not a directory" in err
    assert (tmp_path / "file").read_text() == "precious"
