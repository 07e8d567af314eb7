"""Checkpoints: exact round trip, atomic writes, and refusal of pickles and truncated files."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench.checkpoint import CheckpointError, load_checkpoint, load_metrics, save_checkpoint


@pytest.mark.parametrize("mechanism", ["none", "lrt", "fbt"])
def test_round_trip_is_exact(tmp_path, mechanism):
    model = perturbed_model(small_config(mechanism))
    save_checkpoint(model, tmp_path / "ck", metrics={"val_loss": 1.25}, extra={"recipe": "test"})
    again = load_checkpoint(tmp_path / "ck")
    assert again.config == model.config
    for (k, v), (k2, v2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    idx = torch.randint(0, 23, (2, 6))
    assert torch.equal(wb.schedules.sequential(again, idx).logits, wb.schedules.sequential(model, idx).logits)
    assert load_metrics(tmp_path / "ck") == {"val_loss": 1.25}
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["recipe"] == "test"


def test_overwrite_is_atomic_and_leaves_no_temporaries(tmp_path):
    model = perturbed_model(small_config())
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 1})
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 2})
    assert load_metrics(tmp_path / "ck") == {"v": 2}
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_failed_write_keeps_the_previous_checkpoint(tmp_path):
    model = perturbed_model(small_config())
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 1})
    with pytest.raises(ValueError, match="extra_files"):
        save_checkpoint(model, tmp_path / "ck", metrics={"v": 2}, extra_files={"state.pt": {}})
    assert load_metrics(tmp_path / "ck") == {"v": 1}
    assert sorted(os.listdir(tmp_path)) == ["ck"]


class _Exploit:
    def __reduce__(self):
        return (open, (os.environ["WB_MARKER"], "w"))


def test_pickle_payload_is_refused_and_never_executed(tmp_path, monkeypatch):
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    marker = tmp_path / "pwned"
    monkeypatch.setenv("WB_MARKER", str(marker))
    (tmp_path / "ck" / "model.safetensors").write_bytes(pickle.dumps({"wte.weight": _Exploit()}))
    with pytest.raises(CheckpointError, match="safetensors"):
        load_checkpoint(tmp_path / "ck")
    assert not marker.exists()


def test_truncated_file_is_refused(tmp_path):
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    path = tmp_path / "ck" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(tmp_path / "ck")


def test_missing_and_foreign_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nothing")
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    (tmp_path / "ck" / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(CheckpointError, match="not a workbench checkpoint"):
        load_checkpoint(tmp_path / "ck")


def test_weights_that_do_not_match_the_config_are_refused(tmp_path):
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    header = json.loads((tmp_path / "ck" / "config.json").read_text())
    header["model"]["n_embd"] = 64
    (tmp_path / "ck" / "config.json").write_text(json.dumps(header))
    with pytest.raises(CheckpointError, match="wrong shape"):
        load_checkpoint(tmp_path / "ck")
