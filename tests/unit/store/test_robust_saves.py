"""Nothing lost, nothing hung, nothing silent (issue 34): saves keep what they did not write, loads open
only regular files, and a save's own arguments cannot corrupt it. Each test failed before the fix."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import warnings

import numpy as np
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import schedules
from workbench.checkpoint import CheckpointError, load_checkpoint, load_metrics, save_checkpoint


@pytest.fixture
def model():
    return perturbed_model(small_config())


@pytest.fixture(autouse=True)
def no_hang():
    """A hang fails the test in seconds instead of blocking the suite."""
    def fail(*_):
        raise TimeoutError("hung")
    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def tree(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------- data lost
def test_a_hugging_face_model_directory_is_never_replaced(tmp_path, model):
    hf_dir = tmp_path / "gpt2"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    (hf_dir / "model.safetensors").write_bytes(b"weights")
    (hf_dir / "tokenizer.json").write_text("{}")
    before = tree(hf_dir)
    with pytest.raises(CheckpointError, match=re.escape(str(hf_dir))):
        save_checkpoint(model, hf_dir)
    assert tree(hf_dir) == before and sorted(os.listdir(tmp_path)) == ["gpt2"]


def test_files_a_user_puts_in_a_checkpoint_are_kept_across_saves(tmp_path, model):
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 1})
    (tmp_path / "ck" / "notes.txt").write_text("mine")
    (tmp_path / "ck" / "plots").mkdir()
    (tmp_path / "ck" / "plots" / "a.png").write_bytes(b"png")
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 2})
    assert (tmp_path / "ck" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "ck" / "plots" / "a.png").read_bytes() == b"png"
    assert load_metrics(tmp_path / "ck") == {"v": 2} and sorted(os.listdir(tmp_path)) == ["ck"]


def test_a_save_that_would_overwrite_a_user_file_refuses_and_names_it(tmp_path, model):
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 1})
    (tmp_path / "ck" / "state.json").write_text("mine")
    with pytest.raises(CheckpointError, match=r"\['state\.json'\]"):
        save_checkpoint(model, tmp_path / "ck", extra_files={"state.json": {"a": 1}})
    assert (tmp_path / "ck" / "state.json").read_text() == "mine" and load_metrics(tmp_path / "ck") == {"v": 1}
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_train_out_refuses_foreign_run_files_unless_overwrite(tmp_path, capsys):
    from workbench.cli import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "history.csv").write_text("my,own\n1,2\n")
    args = ["train", "--task", "running_sum", "--task-param", "p=5", "--task-param", "length=8", "--n-layer", "1",
            "--n-head", "2", "--n-embd", "16", "--batch-size", "4", "--eval-size", "4", "--steps", "2",
            "--no-progress", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "history.csv" in err and "--overwrite" in err and "Traceback" not in err
    assert (out / "history.csv").read_text() == "my,own\n1,2\n"
    assert main([*args, "--overwrite"]) == 0
    assert (out / "history.csv").read_text().startswith("step,")


def test_a_foreign_checkpoint_folder_in_the_run_directory_is_refused_before_training(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "notes.txt").write_text("mine")
    cfg = wb.TrainConfig(task="running_sum", task_params={"p": 5, "length": 8}, steps=2, batch_size=4,
                         eval_size=4, progress=False, out_dir=str(out), model={"n_layer": 1, "n_head": 2, "n_embd": 16})
    with pytest.raises(ValueError, match="out_dir=.*" + re.escape(str(out / "checkpoint"))):
        wb.train(cfg)
    assert os.listdir(out / "checkpoint") == ["notes.txt"] and not (out / "history.csv").exists()


def _tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    from workbench.hf import FeedbackLM

    hf_cfg = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    return FeedbackLM(transformers.GPT2LMHeadModel(hf_cfg))


def test_save_pretrained_keeps_a_users_directory_and_files(tmp_path):
    from workbench.hf import FeedbackLM

    wrapper = _tiny_gpt2()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "config"}')
    (mine / "notes.md").write_text("notes")
    before = tree(mine)
    with pytest.raises(CheckpointError, match=re.escape(str(mine))):
        wrapper.save_pretrained(mine)
    assert tree(mine) == before
    wrapper.save_pretrained(tmp_path / "saved")
    (tmp_path / "saved" / "tokenizer.json").write_text("{}")
    wrapper.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "tokenizer.json").read_text() == "{}"
    FeedbackLM.from_pretrained(tmp_path / "saved")
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "absent"))):
        FeedbackLM.from_pretrained(tmp_path / "absent")


# ---------------------------------------------------------------------------------------------- hang
@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "old_layout"])
def test_a_named_pipe_is_refused_not_waited_on(tmp_path, model, manifest):
    save_checkpoint(model, tmp_path / "ck")
    if not manifest:
        (tmp_path / "ck" / "manifest.json").unlink()
        header = json.loads((tmp_path / "ck" / "config.json").read_text())
        (tmp_path / "ck" / "config.json").write_text(json.dumps({**header, "format": 1}))
    (tmp_path / "ck" / "model.safetensors").unlink()
    os.mkfifo(tmp_path / "ck" / "model.safetensors")
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path / "ck" / "model.safetensors"))), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the old layout loads only unverified, with a warning
        load_checkpoint(tmp_path / "ck", verify=manifest)


def test_a_link_to_dev_zero_is_refused_unread(tmp_path, model):
    save_checkpoint(model, tmp_path / "ck")
    (tmp_path / "ck" / "model.safetensors").unlink()
    (tmp_path / "ck" / "model.safetensors").symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path / "ck" / "model.safetensors")) + ".*link"):
        load_checkpoint(tmp_path / "ck")


def test_a_linked_checkpoint_directory_is_named_as_a_link(tmp_path, model):
    save_checkpoint(model, tmp_path / "ck")
    (tmp_path / "link").symlink_to(tmp_path / "ck")
    link_and_target = re.escape(str(tmp_path / "link")) + ".*" + re.escape(str(tmp_path / "ck"))
    with pytest.raises(CheckpointError, match=link_and_target):
        load_checkpoint(tmp_path / "link")
    with pytest.raises(CheckpointError, match=link_and_target):
        save_checkpoint(model, tmp_path / "link")


# ---------------------------------------------------------------------------------------------- silent wrong
@pytest.mark.parametrize("key", ["model", "format", "package_version"])
def test_extra_cannot_overwrite_the_header(tmp_path, model, key):
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 1})
    with pytest.raises(ValueError, match=rf"extra.*\['{key}'\]"):
        save_checkpoint(model, tmp_path / "ck", extra={key: {"n_layer": 1}})
    assert load_checkpoint(tmp_path / "ck").config == model.config and load_metrics(tmp_path / "ck") == {"v": 1}


@pytest.mark.parametrize("metrics, message", [
    ([1, 2], "metrics=list"),
    ("loss", "metrics=str"),
    ({1: 2.0}, r"metrics.*\(int\)"),
    ({"loss": float("nan")}, r"metrics\['loss'\]=nan"),
    ({"eval": {"acc": [0.5, float("inf")]}}, r"metrics\['eval'\]\['acc'\]\[1\]=inf"),
    ({"when": object()}, r"metrics\['when'\].*object"),
])
def test_metrics_must_be_a_json_object_of_finite_numbers(tmp_path, model, metrics, message):
    with pytest.raises(ValueError, match=message):
        save_checkpoint(model, tmp_path / "ck", metrics=metrics)
    assert not os.path.exists(tmp_path / "ck")


def test_numpy_and_tensor_scalars_in_metrics_are_saved_as_numbers(tmp_path, model):
    save_checkpoint(model, tmp_path / "ck", metrics={"a": np.float32(0.5), "b": np.int64(3), "c": torch.tensor(2.0)})
    assert load_metrics(tmp_path / "ck") == {"a": 0.5, "b": 3, "c": 2.0}


def test_a_deleted_manifest_needs_verify_false_and_warns(tmp_path, model):
    save_checkpoint(model, tmp_path / "ck")
    (tmp_path / "ck" / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path / "ck")) + ".*manifest.json.*verify=False"):
        load_checkpoint(tmp_path / "ck")
    with pytest.warns(UserWarning, match="verify=False"):
        assert load_checkpoint(tmp_path / "ck", verify=False).config == model.config


def test_a_write_protected_checkpoint_is_refused_and_leaves_no_temporary(tmp_path, model):
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 1})
    os.chmod(tmp_path / "ck", 0o555)
    try:
        with pytest.raises(CheckpointError, match="write-protected"):
            save_checkpoint(model, tmp_path / "ck", metrics={"v": 2})
        assert sorted(os.listdir(tmp_path)) == ["ck"] and load_metrics(tmp_path / "ck") == {"v": 1}
    finally:
        os.chmod(tmp_path / "ck", 0o755)


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_aux_weight_is_checked_in_the_schedule_api(model, bad):
    idx = torch.randint(0, 23, (1, 5))
    for make in (lambda: schedules.Multipass(2, bad), lambda: schedules.PassMix.of({1: 0.5, 2: 0.5}, bad),
                 lambda: schedules.Multipass(2, aux_weight=bad).run(model, idx)):
        with pytest.raises(ValueError, match=f"aux_weight={bad}"):
            make()


@pytest.mark.parametrize("mix, message", [({1.5: 1.0}, "count=1.5"), ({1: float("nan")}, "probability"),
                                          ({1: 0.5, 2: float("inf")}, "probability")])
def test_a_pass_mix_is_never_rounded_or_nan(mix, message):
    with pytest.raises(ValueError, match=message):
        schedules.PassMix.of(mix)


def test_numpy_keys_in_a_pass_mix_are_their_ints():
    assert schedules.PassMix.of({np.int64(1): np.float64(0.5), 2: 0.5}) == schedules.PassMix.of({1: 0.5, 2: 0.5})


def test_a_config_changed_after_construction_is_checked_when_built():
    cfg = wb.ModelConfig(vocab_size=11, n_layer=1, n_head=1, n_embd=8, seq_len=4)
    cfg.n_layer = 0
    with pytest.raises(ValueError, match="n_layer=0"):
        wb.build_model(cfg)


def test_fractional_positions_are_refused(model):
    idx = torch.randint(0, 23, (1, 3))
    with pytest.raises(ValueError, match="positions.*torch.float32"):
        model.step(idx, positions=torch.tensor([0.0, 0.5, 1.0]))


@pytest.mark.parametrize("temperature", [math.inf, math.nan, -1.0])
def test_temperature_must_be_finite(model, temperature):
    with pytest.raises(ValueError, match=f"temperature={temperature}"):
        wb.generate(model, torch.zeros(1, 2, dtype=torch.long), 2, temperature=temperature)


def test_numpy_scalars_configure_like_python_numbers():
    cfg = wb.ModelConfig(vocab_size=np.int64(11), n_layer=np.int32(1), n_head=1, n_embd=8, seq_len=4,
                         fbt_jitter=np.float32(0.5))
    assert cfg.vocab_size == 11 and type(cfg.vocab_size) is int and type(cfg.fbt_jitter) is float
    json.loads(cfg.to_json())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert wb.TrainConfig(steps=np.int64(3), lr=np.float64(0.01)).steps == 3
