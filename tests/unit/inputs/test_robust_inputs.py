"""Every bad input gets an error that names it: a table of bad inputs, where they enter, and the message.

Model inputs at every public entry point (the forward, the schedules, generate, the analysis), the
configs, the decoder's eos, the CLI's flags, and ``info`` on checkpoints it cannot load.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pickle
import warnings

import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import analysis, schedules
from workbench.analysis.regimes import regime_logits
from workbench.checkpoint import save_checkpoint
from workbench.cli import main
from workbench.validation import check_tokens

MODEL = perturbed_model(small_config("lrt"))  # vocab_size 23: ids in [0, 22]
GOOD = torch.tensor([[1, 2, 3, 4]])
ZERO = analysis.interventions.Intervention("zero")

ENTRY_POINTS = {
    "forward": lambda idx: MODEL(idx),
    "step": lambda idx: MODEL.step(idx),
    **{f"run[{s}]": functools.partial(lambda s, idx: schedules.parse(s).run(MODEL, idx), s)
       for s in schedules.SCHEDULES},
    "single": lambda idx: schedules.Single().run(MODEL, idx),
    "sequential": lambda idx: schedules.Sequential().run(MODEL, idx),
    "multipass": lambda idx: schedules.Multipass(2).run(MODEL, idx),
    "interleaved": lambda idx: schedules.Interleaved(2).run(MODEL, idx),
    "blockwise": lambda idx: schedules.Blockwise(2).run(MODEL, idx),
    "iterate_passes": lambda idx: next(schedules.iterate_passes(MODEL, idx)),
    "pass_dynamics": lambda idx: analysis.pass_dynamics(MODEL, idx, passes=2),
    "memory_trajectory": lambda idx: analysis.memory_trajectory(MODEL, idx),
    "run_with_cache": lambda idx: analysis.run_with_cache(MODEL, idx, "sequential"),
    "intervene": lambda idx: analysis.interventions.intervene(MODEL, idx, ZERO, 1),
    "run_logits[soft]": lambda idx: analysis.interventions.run_logits(MODEL, idx, regime="soft", prompt_len=1),
    "prefilled": lambda idx: schedules.regime("fused", prompt_len=1).run(MODEL, idx),
    "regime_logits": lambda idx: regime_logits(MODEL, idx, 1, "soft"),
}
BAD_IDS = {  # the bad input, and what of it the message must name after the parameter's name
    "past_vocab": (torch.tensor([[1, 23]]), r"\[1, 23\].*\[0, 22\]"),
    "negative": (torch.tensor([[-1, 2]]), r"\[-1, 2\].*\[0, 22\]"),
    "float": (torch.ones(1, 3), "torch.float32"),
    "bool": (torch.ones(1, 3, dtype=torch.bool), "torch.bool"),
    "empty_T": (torch.zeros(1, 0, dtype=torch.long), r"\(1, 0\)"),
    "empty_B": (torch.zeros(0, 3, dtype=torch.long), r"\(0, 3\)"),
    "rank_1": (torch.tensor([1, 2]), r"\(2,\)"),
    "rank_3": (torch.ones(1, 2, 2, dtype=torch.long), r"\(1, 2, 2\)"),
    "list": ([[1, 2]], "list"),
}


@pytest.mark.parametrize("bad", sorted(BAD_IDS))
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_bad_token_ids_are_named_at_every_entry_point(entry, bad):
    idx, message = BAD_IDS[bad]
    with pytest.raises(ValueError, match="idx.*" + message):
        ENTRY_POINTS[entry](idx)


@pytest.mark.parametrize("bad", sorted(BAD_IDS))
def test_bad_prompts_are_named_by_generate(bad):
    idx, message = BAD_IDS[bad]
    with pytest.raises(ValueError, match="prompt.*" + message):
        wb.generate(MODEL, idx, 2)


def test_good_ids_pass_in_both_integer_dtypes_and_meta_tensors_are_not_read():
    assert torch.equal(MODEL(GOOD), MODEL(GOOD.to(torch.int32)))
    check_tokens(23, torch.empty(2, 3, dtype=torch.long, device="meta"))  # no values to read: shape only


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_check_never_waits_for_the_device():
    model = wb.build_model(small_config(), device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        model(GOOD.cuda())
        schedules.parse("multipass").run(model, GOOD.cuda())
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _mutated(config, **changes):
    """A config changed after construction, as ``cfg.n_layer = 0`` does (no validation runs then)."""
    for name, value in changes.items():
        setattr(config, name, value)
    return config


CONFIGS = [
    (lambda: wb.build_model(_mutated(small_config(), n_layer=0)), "ModelConfig.n_layer=0"),
    (lambda: wb.build_model(wb.TrainConfig()), "config.*TrainConfig"),
    (lambda: wb.train(_mutated(wb.TrainConfig(), steps=0)), "TrainConfig.steps=0"),
    (lambda: wb.train(MODEL), "cfg.*GPT"),
    (lambda: wb.train(wb.TrainConfig(), callback=5), "callback=5"),
    (lambda: wb.LiveLossPlot(every=0), "every=0"),
    (lambda: wb.ModelConfig(logit_softcap=float("inf")), "ModelConfig.logit_softcap=inf"),
    (lambda: wb.ModelConfig(logit_softcap=float("nan")), "ModelConfig.logit_softcap=nan"),
    (lambda: wb.ModelConfig(logit_softcap=-1.0), r"ModelConfig.logit_softcap=-1.0.*\[0.0, inf\)"),
    (lambda: wb.ModelConfig(rope_base=float("inf")), "ModelConfig.rope_base=inf"),
    (lambda: wb.TrainConfig(lr=float("inf")), "TrainConfig.lr=inf"),
    (lambda: wb.TrainConfig(budget_flops=float("inf")), "TrainConfig.budget_flops=inf"),
    (lambda: wb.generate(MODEL, GOOD, 2, eos=23), r"eos=23.*\[0, 22\]"),
    (lambda: wb.generate(MODEL, GOOD, 2, eos=-1), r"eos=-1.*\[0, 22\]"),
    (lambda: wb.generate(MODEL, GOOD, 2, eos=1.5), r"eos=1.5.*\[0, 22\]"),
]


@pytest.mark.parametrize("make,message", CONFIGS, ids=[m for _, m in CONFIGS])
def test_bad_settings_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


TRAIN = ["train", "--task", "running_sum", "--steps", "1", "--no-progress"]
CLI = {
    "n_layer_flag_vs_param": (TRAIN + ["--n-layer", "2", "--model-param", "n_layer=3"],
                              "--n-layer 2 contradicts --model-param n_layer=3"),
    "mechanism_flag_vs_param": (TRAIN + ["--mechanism", "lrt", "--model-param", "mechanism=fbt"],
                                "--mechanism 'lrt' contradicts --model-param mechanism='fbt'"),
    "param_twice": (TRAIN + ["--model-param", "n_layer=2", "--model-param", "n_layer=3"],
                    "--model-param n_layer is given twice with different values (2 and 3)"),
    "task_param_twice": (TRAIN + ["--task-param", "p=3", "--task-param", "p=5"],
                         "--task-param p is given twice"),
}


@pytest.mark.parametrize("case", sorted(CLI))
def test_contradictory_cli_flags_are_refused(case, capsys, tmp_path):
    argv, message = CLI[case]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["probe", "contraction", "traces", "reproduce"])
@pytest.mark.parametrize("threads", ["0", "-2", "two"])
def test_thread_counts_must_be_positive(command, threads, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, *(["ck"] if command in ("probe", "contraction", "traces") else []), "--threads", threads])
    assert exit_.value.code == 2
    assert f"argument --threads: '{threads}' is invalid: must be an int >= 1" in capsys.readouterr().err


def _truncate(ck):
    data = (ck / "model.safetensors").read_bytes()
    (ck / "model.safetensors").write_bytes(data[:-100])


def _reseal(ck):
    """A damaged checkpoint whose manifest vouches for the damage: the checks past the manifest's refuse it."""
    files = {name: (ck / name).read_bytes() for name in ("config.json", "model.safetensors", "metrics.json")}
    listing = {name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in files.items()}
    (ck / "manifest.json").write_text(json.dumps({"format": 2, "files": listing}))


def _mismatch(ck):
    header = json.loads((ck / "config.json").read_text())
    header["model"]["n_embd"] = 64
    (ck / "config.json").write_text(json.dumps(header))
    _reseal(ck)


def _pickle(ck):
    (ck / "model.safetensors").write_bytes(pickle.dumps({"wte.weight": [1.0]}))
    _reseal(ck)


def _no_manifest(ck):
    (ck / "manifest.json").unlink()


def _tamper(ck):
    header = json.loads((ck / "config.json").read_text())
    header["model"]["rope_base"] = 500.0
    (ck / "config.json").write_text(json.dumps(header))


INFO = {"truncated": (_truncate, "truncated"), "mismatched": (_mismatch, "wrong shape"),
        "pickled": (_pickle, "is not a valid safetensors file"), "edited_config": (_tamper, "manifest"),
        "manifest_deleted": (_no_manifest, "has no manifest.json"),
        "not_there": (lambda ck: None, "no such directory")}


@pytest.mark.parametrize("case", sorted(INFO))
def test_info_exits_non_zero_on_a_checkpoint_it_cannot_load(case, tmp_path, capsys):
    ck = tmp_path / "ck"
    if case != "not_there":
        save_checkpoint(perturbed_model(small_config()), ck)
    damage, message = INFO[case]
    damage(ck)
    assert main(["info", str(ck)]) == 2
    assert message in capsys.readouterr().err


def test_info_refuses_non_finite_weights(tmp_path, capsys):
    model = perturbed_model(small_config())
    with torch.no_grad():
        model.wte.weight[0, 0] = float("nan")
    save_checkpoint(model, tmp_path / "ck")
    assert main(["info", str(tmp_path / "ck")]) == 2
    err = capsys.readouterr().err
    assert "'wte.weight'" in err and "allow_nonfinite" in err


# ---------------------------------------------------------------------------------------------- sizes
SIZES = {  # what asks for the memory, the argument the refusal names
    "model": (lambda: wb.build_model(small_config(vocab_size=10**6)), "config="),
    "task batch": (lambda: wb.tasks.get("running_sum").sample(10**6, seed=0), "n=1000000 "),
    "train stream": (lambda: wb.tasks.TrainStream(wb.tasks.get("running_sum"), batch_size=10**6), "batch_size="),
    "generate": (lambda: wb.generate(MODEL, GOOD, max_new_tokens=10**7), "max_new_tokens=10000000 "),
}


@pytest.mark.parametrize("case", sorted(SIZES))
def test_a_size_that_cannot_fit_is_refused_before_allocation(case, monkeypatch):
    """With the machine's memory pinned at 16 MiB, each request beyond it names its argument and the GiB it
    needs, instead of reaching the allocator (or a per-example loop that would run for hours)."""
    monkeypatch.setattr(wb.validation, "memory_bytes", lambda device=None: 16 * 2**20)
    make, name = SIZES[case]
    with pytest.raises(ValueError, match=f"{name}.*GiB"):
        make()


def test_sizes_that_fit_are_not_refused(monkeypatch):
    monkeypatch.setattr(wb.validation, "memory_bytes", lambda device=None: 16 * 2**20)
    wb.build_model(small_config())
    wb.tasks.get("running_sum").sample(64, seed=0)
    wb.generate(MODEL, GOOD, max_new_tokens=4)


def test_the_memory_a_device_has():
    assert wb.validation.memory_bytes("meta") is None and wb.validation.memory_bytes("cpu") > 2**20


def test_generate_warns_past_the_trained_length_and_not_within_it():
    length = MODEL.config.seq_len
    with pytest.warns(UserWarning, match=f"seq_len={length}"):
        out = wb.generate(MODEL, GOOD[:, :2], length)
    assert out.shape[1] == 2 + length  # a warning, not a refusal: RoPE computes any position
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wb.generate(MODEL, GOOD[:, :2], length - 2)


def test_the_trainer_and_the_schedules_accept_the_same_pass_counts():
    from workbench.validation import MAX_COUNT

    assert wb.TrainConfig(schedule=schedules.Multipass(MAX_COUNT)).schedule.passes == MAX_COUNT
    with pytest.raises(ValueError, match="passes"):
        schedules.Multipass(MAX_COUNT + 1)
    with pytest.raises(ValueError, match="passes"):
        wb.TrainConfig(schedule={"schedule": "multipass", "passes": MAX_COUNT + 1})
