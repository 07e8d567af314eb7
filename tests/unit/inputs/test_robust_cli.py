"""The command line never prints a traceback for a user's error (issue 34): every subcommand answers bad
arguments, our errors and OS errors (disk full, permission, a path that exists) with one line and exit
status 2, and checks what it can before any compute."""

from __future__ import annotations

import errno

import pytest

import workbench as wb
from workbench import cli, tasks
from workbench.checkpoint import save_checkpoint
from workbench.cli import main


@pytest.fixture(scope="module")
def fbt_checkpoint(tmp_path_factory):
    """A tiny FBT model that records the task it was made for (what the analysis commands read)."""
    task = tasks.get("running_sum", p=5, length=8)
    cfg = wb.TrainConfig(model={"mechanism": "fbt", "n_layer": 1, "n_head": 2, "n_embd": 16})
    path = tmp_path_factory.mktemp("ck") / "fbt"
    save_checkpoint(wb.build_model(cfg.model_config(task.vocab_size, task.seq_len)), path,
                    extra={"task": "running_sum", "task_params": {"p": 5, "length": 8}})
    return path


def one_line_error(capsys, code: int, expected: str) -> None:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err, err


def test_contraction_with_one_pass_prints_its_summary(fbt_checkpoint, tmp_path, capsys):
    assert main(["contraction", str(fbt_checkpoint), "--passes", "1", "--n", "2", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "pass_dynamics.csv").is_file()


@pytest.mark.parametrize("command", ["probe", "contraction", "traces"])
def test_out_naming_a_file_is_refused_before_any_compute(fbt_checkpoint, tmp_path, capsys, monkeypatch, command):
    (tmp_path / "file").write_text("precious")
    monkeypatch.setattr(wb.checkpoint, "load_checkpoint", lambda *a, **k: pytest.fail("computed first"))
    code = main([command, str(fbt_checkpoint), "--out", str(tmp_path / "file")])
    one_line_error(capsys, code, "--out")
    assert (tmp_path / "file").read_text() == "precious"


@pytest.mark.parametrize("argv, flag", [
    (["contraction", "CK", "--passes", "0"], "--passes"),
    (["probe", "CK", "--n", "-3"], "--n"),
    (["traces", "CK", "--max-new-tokens", "-1"], "--max-new-tokens"),
    (["traces", "CK", "--prefill-passes", "0"], "--prefill-passes"),
    (["reproduce", "causal_use", "--scale", "inf"], "--scale"),
    (["reproduce", "causal_use", "--scale", "nan"], "--scale"),
    (["train", "--steps", "x"], "--steps"),
])
def test_bad_arguments_name_the_argument(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument {flag}" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, expected", [
    (["info"], "give a CHECKPOINT"),
    (["reproduce"], "give a recipe NAME"),
    (["reproduce", "no_such_recipe"], "unknown recipe 'no_such_recipe'"),
    (["train", "--steps", "0"], "TrainConfig.steps=0"),
    (["train", "--task", "nope"], "nope"),
])
def test_our_errors_are_one_line(argv, expected, capsys):
    one_line_error(capsys, main(argv), expected)


@pytest.mark.parametrize("error, expected", [
    (OSError(errno.ENOSPC, "No space left on device", "/data/ck"), "No space left on device: /data/ck"),
    (PermissionError(errno.EACCES, "Permission denied", "/data/ck"), "Permission denied: /data/ck"),
    (FileExistsError(errno.EEXIST, "File exists", "/data/out"), "File exists: /data/out"),
    (OverflowError("cannot convert float infinity to integer"), "cannot convert float infinity"),
])
@pytest.mark.parametrize("command", ["info", "train", "probe", "contraction", "traces", "reproduce", "tasks"])
def test_os_errors_are_one_line_in_every_subcommand(command, error, expected, capsys, monkeypatch):
    def fail(args):
        raise error
    argv = {"info": ["info", "CK"], "probe": ["probe", "CK"], "contraction": ["contraction", "CK"],
            "traces": ["traces", "CK"], "reproduce": ["reproduce", "causal_use"]}.get(command, [command])
    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: _rebound(parser, command, fail))
    one_line_error(capsys, main(argv), expected)


def _rebound(parser, command, func):
    """The parser with ``command`` dispatching to ``func`` (set_defaults captured the original)."""
    sub = next(a for a in parser._actions if a.dest == "command")
    sub.choices[command].set_defaults(func=func)
    return parser
