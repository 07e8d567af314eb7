"""Checkpoints: exact round trip, atomic writes, the old layout, and refusal of pickles, truncated or edited
files, non-finite or integer weights, and of paths that are not checkpoints."""

from __future__ import annotations

import json
import os
import pickle
import re

import pytest
import torch
from safetensors.torch import save_file

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import files, store
from workbench.checkpoint import CheckpointError, load_checkpoint, load_metrics, read_safetensors, save_checkpoint


@pytest.mark.parametrize("mechanism", ["none", "lrt", "fbt"])
def test_round_trip_is_exact(tmp_path, mechanism):
    model = perturbed_model(small_config(mechanism))
    save_checkpoint(model, tmp_path / "ck", metrics={"val_loss": 1.25}, extra={"recipe": "test"})
    again = load_checkpoint(tmp_path / "ck")
    assert again.config == model.config
    for (k, v), (k2, v2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    idx = torch.randint(0, 23, (2, 6))
    exact = wb.schedules.Sequential()
    assert torch.equal(exact.run(again, idx).logits, exact.run(model, idx).logits)
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


def _without_manifest(path):
    """A checkpoint whose manifest was deleted: config, weights, metrics."""
    (path / "manifest.json").unlink()
    return path


def test_missing_and_foreign_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path / "nothing"))):
        load_checkpoint(tmp_path / "nothing")
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    (tmp_path / "ck" / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path / "ck" / "config.json")) + ".*manifest"):
        load_checkpoint(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="config.json.*'model'"):
        load_checkpoint(_without_manifest(tmp_path / "ck"))


def test_weights_that_do_not_match_the_config_are_refused(tmp_path):
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    header = json.loads((tmp_path / "ck" / "config.json").read_text())
    header["model"]["n_embd"] = 64
    (tmp_path / "ck" / "config.json").write_text(json.dumps(header))
    weights = re.escape(str(tmp_path / "ck" / "model.safetensors"))
    with pytest.raises(CheckpointError, match=weights + ".*blocks.0.attn.c_k.weight"):
        load_checkpoint(tmp_path / "ck", verify=False)


def test_a_config_edited_to_other_values_of_the_same_shapes_is_refused(tmp_path):
    model = perturbed_model(small_config())
    save_checkpoint(model, tmp_path / "ck")
    header = json.loads((tmp_path / "ck" / "config.json").read_text())
    header["model"]["logit_softcap"] = 3.0
    text = json.dumps(header, indent=2, sort_keys=True)
    (tmp_path / "ck" / "config.json").write_text(text + " " * (len((tmp_path / "ck" / "config.json").read_text())
                                                                 - len(text)))
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path / "ck" / "config.json")) + ".*sha256"):
        load_checkpoint(tmp_path / "ck")
    assert load_checkpoint(tmp_path / "ck", verify=False).config.logit_softcap == 3.0  # the explicit opt-out
    # deleting the manifest does not turn verification off: it loads only when asked, with a warning
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path / "ck")) + ".*manifest.json.*verify=False"):
        load_checkpoint(_without_manifest(tmp_path / "ck"))
    with pytest.warns(UserWarning, match="verify=False"):
        assert load_checkpoint(tmp_path / "ck", verify=False).config.logit_softcap == 3.0



def test_the_old_layout_loads_unchanged(tmp_path):
    model = perturbed_model(small_config("lrt"))
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 1})
    with pytest.warns(UserWarning, match="verify=False"):  # no manifest: loads when asked, with a warning
        again = load_checkpoint(_without_manifest(tmp_path / "ck"), verify=False)
        assert load_metrics(tmp_path / "ck", verify=False) == {"v": 1}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 2})  # an old checkpoint is replaced by a new one
    assert load_metrics(tmp_path / "ck") == {"v": 2} and (tmp_path / "ck" / "manifest.json").is_file()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_unless_allowed(tmp_path, value):
    model = perturbed_model(small_config())
    with torch.no_grad():
        model.blocks[1].mlp.c_fc.weight[0, 0] = value
    save_checkpoint(model, tmp_path / "ck")
    with pytest.raises(CheckpointError, match=r"blocks\.1\.mlp\.c_fc\.weight.*allow_nonfinite"):
        load_checkpoint(tmp_path / "ck")
    assert not torch.isfinite(load_checkpoint(tmp_path / "ck", allow_nonfinite=True).blocks[1].mlp.c_fc.weight).all()


def test_integer_weights_are_refused(tmp_path):
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    path = tmp_path / "ck" / "model.safetensors"
    state = read_safetensors(path)
    state["wte.weight"] = state["wte.weight"].to(torch.int32)
    save_file(state, str(path))
    with pytest.raises(CheckpointError, match="wte.weight.*torch.int32"), \
            pytest.warns(UserWarning, match="verify=False"):
        load_checkpoint(_without_manifest(tmp_path / "ck"), verify=False)


@pytest.mark.parametrize("what", ["run_directory", "unrelated_file", "regular_file", "symlink"])
def test_saving_never_destroys_what_is_not_a_checkpoint(tmp_path, what):
    target = tmp_path / "target"
    if what == "run_directory":
        target.mkdir()
        for name in ("history.csv", "train_config.json"):
            (target / name).write_text("precious")
        (target / "checkpoint").mkdir()
    elif what == "unrelated_file":
        target.mkdir()
        (target / "notes.txt").write_text("precious")
    elif what == "regular_file":
        target.write_text("precious")
    else:
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(CheckpointError, match=re.escape(str(target))):
        save_checkpoint(perturbed_model(small_config()), target)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_saving_into_an_empty_directory_is_fine(tmp_path):
    (tmp_path / "ck").mkdir()
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    assert load_checkpoint(tmp_path / "ck").config == small_config()


@pytest.mark.parametrize("name", ["../x.json", "/tmp/x.json", "sub/x.json", ".hidden.json", "config.json",
                                  "manifest.json", "state.pt", ""])
def test_extra_file_names_stay_inside_the_checkpoint(tmp_path, name):
    with pytest.raises(ValueError, match="extra_files.*" + re.escape(repr(name))):
        save_checkpoint(perturbed_model(small_config()), tmp_path / "ck", extra_files={name: {}})
    assert os.listdir(tmp_path) == []


def test_an_interrupted_two_rename_save_is_recovered(tmp_path, monkeypatch):
    """Where the atomic exchange is unavailable, a kill between the renames leaves the old version aside:
    loads find it there, and the next save puts it back and cleans up."""
    model = perturbed_model(small_config())
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 1})
    os.rename(tmp_path / "ck", tmp_path / ".ck.old-dead")  # the first rename of a killed save
    (tmp_path / ".ck.tmp-dead").mkdir()  # its half-written temporary
    assert load_metrics(tmp_path / "ck") == {"v": 1}
    assert load_checkpoint(tmp_path / "ck").config == model.config
    monkeypatch.setattr(store, "_exchange", lambda a, b: False)
    save_checkpoint(model, tmp_path / "ck", metrics={"v": 2})
    assert load_metrics(tmp_path / "ck") == {"v": 2}
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_save_checkpoint_names_a_bad_path_and_a_model_without_weights(tmp_path, monkeypatch):
    """path=None used to fail inside pathlib (TypeError) and a meta model inside safetensors ("Cannot copy out of meta
    tensor"), naming neither; both are refused by name before anything is written, as is "" (the current directory)."""
    model = perturbed_model(small_config())
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="^path=None.*str or os.PathLike"):
        save_checkpoint(model, None)
    with pytest.raises(ValueError, match="^path=''"):
        save_checkpoint(model, "")
    with pytest.raises(ValueError, match="^model=GPT.*meta device.*to_empty.*cpu"):
        save_checkpoint(wb.build_model(small_config(), device="meta"), tmp_path / "ck")
    assert os.listdir(tmp_path) == ["notes.txt"]


@pytest.mark.parametrize("name", ["a" * 250, "é" * 127 + "c"], ids=["ascii_250", "utf8_255_bytes"])
def test_a_save_to_any_legal_name_works_however_long(tmp_path, monkeypatch, name):
    """The temporaries and set-aside versions beside a checkpoint are named from its name: a 250-byte name pushed them
    past the 255-byte limit (OSError: File name too long). A long name gives them a shortened stem with a hash of the
    whole, which the next save's clean-up and a load of a version set aside find the same way."""
    model, path = perturbed_model(small_config()), tmp_path / name
    save_checkpoint(model, path, metrics={"v": 1})
    save_checkpoint(model, path, metrics={"v": 2})  # the exchange: a temporary beside it
    assert load_metrics(path) == {"v": 2} and os.listdir(tmp_path) == [name]
    os.rename(path, tmp_path / f".{store.sibling_stem(path)}.old-dead")  # a save killed between its two renames
    assert load_metrics(path) == {"v": 2}
    monkeypatch.setattr(store, "_exchange", lambda a, b: False)  # the two-rename save, its old version set aside
    save_checkpoint(model, path, metrics={"v": 3})
    assert load_metrics(path) == {"v": 3} and os.listdir(tmp_path) == [name]
    assert len(os.fsencode(store.sibling_stem(path))) + store.SIBLING_TAIL <= 255


def test_a_saved_checkpoint_directory_has_the_usual_permissions(tmp_path):
    model = wb.build_model(wb.ModelConfig(vocab_size=11, n_layer=1, n_head=1, n_embd=8, seq_len=4))
    wb.save_checkpoint(model, tmp_path / "ck")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "ck").stat().st_mode & 0o777 == 0o777 & ~umask


def test_an_atomically_written_file_has_the_permissions_a_plain_write_leaves(tmp_path):
    """A new file follows the umask (not mkstemp's 0600); a replaced one keeps the mode it had."""
    umask = os.umask(0)
    os.umask(umask)
    files.write_json_atomic(tmp_path / "summary.json", {"v": 1})
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == 0o666 & ~umask
    os.chmod(tmp_path / "summary.json", 0o640)
    files.write_bytes_atomic(tmp_path / "summary.json", b"{}")
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "summary.json").read_bytes() == b"{}" and sorted(os.listdir(tmp_path)) == ["summary.json"]


def test_a_csv_table_of_generated_text_reads_back_row_for_row(tmp_path):
    """A byte model's continuation may hold a carriage return; unquoted, pandas reads it back as a row break."""
    import pandas as pd

    table = pd.DataFrame({"arm": ["a", "b"], "text": ["x\ry\x0c\"z,", "\n\r\n"], "value": [1.5, 2]})
    files.write_csv(tmp_path / "t.csv", table)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "t.csv"), table)
