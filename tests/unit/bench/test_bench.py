"""The benchmark's bookkeeping (never its timings): the util column and the nanoGPT side-by-side rows."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tools import bench

STUB_NANOGPT = '''
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class GPTConfig:
    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float
    bias: bool


class GPT(nn.Module):  # nanoGPT's interface: GPT(config), model(idx, targets) -> (logits, loss); prints on build
    def __init__(self, config):
        super().__init__()
        assert config.dropout == 0.0 and config.bias is False
        print("number of parameters: (stub)")
        self.emb = nn.Embedding(config.vocab_size, config.vocab_size)

    def forward(self, idx, targets):
        logits = self.emb(idx)
        return logits, nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
'''


def test_load_nanogpt_names_the_missing_file(tmp_path):
    with pytest.raises(ValueError, match="nanogpt=.*model.py"):
        bench.load_nanogpt(tmp_path / "model.py")


@pytest.mark.slow
def test_quick_bench_reports_util_and_the_nanogpt_rows(tmp_path, capsys):
    path = tmp_path / "model.py"
    path.write_text(STUB_NANOGPT)
    table = bench.run_benchmarks(quick=True, threads=1, nanogpt=path).set_index("benchmark")
    assert "number of parameters" not in capsys.readouterr().out  # stdout stays the table's (--json)
    matmul = table.loc[table.index.str.startswith("float32 matmul")]
    assert len(matmul) == 1 and matmul["util"].iloc[0] == pytest.approx(1.0)
    train = table.loc[table.index.str.startswith("train step")]
    assert train["util"].notna().all() and (train["util"] > 0).all()
    for shape, ours in (("4x128", "train step 4x128 baseline"), ("6x256", "train step 6x256 baseline")):
        side = table.loc[f"{ours} / nanoGPT"]
        assert side["reference"] == f"train step {shape} nanoGPT" and side["target"] == 1.0
        assert side["ms"] == table.loc[ours, "ms"]  # the same timings, divided by nanoGPT's
        assert side["ratio"] == pytest.approx(table.loc[ours, "ms"] / table.loc[side["reference"], "ms"])
    base = "train step 4x128 baseline"
    for label in ("no softcap", "no QK-norm", "no RoPE", "none of the three"):  # what each feature costs
        row = table.loc[f"{base}, {label}"]
        assert row["reference"] == base and row["floor"] == pytest.approx(1.0) and row["ratio"] > 0
    for fast in (base, "train step 4x128 LRT interleaved S=2", "train step 4x128 FBT 3-pass"):  # what it buys
        plain = table.loc[f"{fast}, plain path"]
        assert plain["reference"] == fast and plain["floor"] == pytest.approx(1.0) and plain["ratio"] > 0
    bare = table.loc[f"{base}, none of the three / nanoGPT"]
    assert bare["reference"] == "train step 4x128 nanoGPT"
    assert bare["ms"] == table.loc[f"{base}, none of the three", "ms"]
    assert (table["faults"].dropna() >= 0).all() and pd.notna(table.loc[base, "faults"])  # counted on Linux


def test_decode_flops_count_every_sequence_of_the_batch():
    """A decode row times one step of the whole batch, so its FLOPs (floor and util) are the batch's."""
    model = bench._model("lrt", 2, 64, 32, 16)
    one, sixteen = bench.decode_flops(model, True, 8.0), bench.decode_flops(model, True, 8.0, batch=16)
    assert sixteen == pytest.approx(16 * one)
    assert bench.decode_flops(model, False, 8.0) < one  # the mechanism's weights count only when read


STUB_NANOCHAT = '''
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class GPTConfig:
    sequence_len: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_kv_head: int
    n_embd: int
    window_pattern: str


class GPT(nn.Module):  # nanochat's interface: built on meta, init_weights(), model(idx, targets) -> loss
    def __init__(self, config):
        super().__init__()
        assert config.window_pattern == "L" and config.n_head == config.n_kv_head
        self.emb = nn.Embedding(config.vocab_size, config.vocab_size)

    def init_weights(self):
        nn.init.normal_(self.emb.weight)

    def forward(self, idx, targets):
        return nn.functional.cross_entropy(self.emb(idx).flatten(0, 1), targets.flatten())
'''


def test_load_nanochat_names_what_it_needs(tmp_path):
    with pytest.raises(ValueError, match="nanochat=.*nanochat/gpt.py"):
        bench.load_nanochat(tmp_path)


@pytest.mark.parametrize("given", ["repo", "repo/nanochat", "repo/nanochat/gpt.py"])
def test_load_nanochat_takes_a_clone_git_named_nanochat(tmp_path, monkeypatch, given):
    """``git clone`` names the repository ``nanochat`` and its package is ``nanochat/`` too: the repository, the
    package folder and ``gpt.py`` all load the same module."""
    package = tmp_path / "nanochat" / "nanochat"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "gpt.py").write_text(STUB_NANOCHAT)
    for name in ("nanochat", "nanochat.gpt"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = bench.load_nanochat(tmp_path / given.replace("repo", "nanochat", 1))
    assert Path(module.__file__) == package / "gpt.py"


@pytest.mark.slow
def test_quick_bench_reports_the_nanochat_rows(tmp_path, monkeypatch):
    (tmp_path / "nanochat").mkdir()
    (tmp_path / "nanochat" / "__init__.py").write_text("")
    (tmp_path / "nanochat" / "gpt.py").write_text(STUB_NANOCHAT)
    for name in ("nanochat", "nanochat.gpt"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    table = bench.run_benchmarks(quick=True, threads=1, nanochat=tmp_path / "nanochat").set_index("benchmark")
    for shape, ours in (("4x128", "train step 4x128 baseline"), ("6x256", "train step 6x256 baseline")):
        side = table.loc[f"{ours} / nanochat"]
        assert side["reference"] == f"train step {shape} nanochat" and side["ms"] == table.loc[ours, "ms"]
        assert side["ratio"] == pytest.approx(table.loc[ours, "ms"] / table.loc[side["reference"], "ms"])
    assert str(tmp_path) not in sys.path  # imported from the user's copy, then the path is put back


def _version(names: list[str], calls: list[str]):
    """A stand-in for a version's bench module: ``run_benchmarks`` builds rows that log their calls and measures them
    through the module's own ``measure``, as the real one does (two groups, the second with a derived row)."""
    version = types.SimpleNamespace(Timings=bench.Timings, measure=None)

    def row(name: str) -> bench.Row:
        return bench.Row(name, lambda: calls.append(name))

    def run_benchmarks(quick: bool, threads: int):
        version.measure([row(n) for n in names[:-1]], 2)
        version.measure([row(names[-1]), bench.Row("derived", None, timing_of=names[-1])], 3)

    version.run_benchmarks = run_benchmarks
    return version


def test_two_versions_side_by_side_time_every_shared_row_alternating_and_list_the_rest():
    """Every row both versions have is timed, the two versions alternating within each round; a row only one has
    is listed, not compared; derived rows (another row's timings) are not timed again."""
    before_calls, after_calls = [], []
    before, after = _version(["a", "old only", "c"], before_calls), _version(["a", "new only", "c"], after_calls)
    after.measure = bench.measure  # the side-by-side run times with the current version's measure
    table = bench.versions_side_by_side(before, after, quick=True, threads=1).set_index("benchmark")
    compared = table.dropna(subset=["after/before"])
    assert list(compared.index) == ["a", "c"] and (compared[["before_ms", "after_ms"]] > 0).all().all()
    assert table.loc["old only", "only in"] == "before" and table.loc["new only", "only in"] == "after"
    assert "derived" not in table.index
    assert before_calls == ["a"] * 3 + ["c"] * 4 and after_calls == ["a"] * 3 + ["c"] * 4  # warm-up + rounds
    assert compared["slower"].tolist() == (compared["after/before"] > bench.SLOWER).tolist()
    before_calls.clear()
    skipped = bench.versions_side_by_side(before, after, quick=True, threads=1, skip="^c$")
    assert "c" not in set(skipped["benchmark"]) and "c" not in before_calls  # never called: no warm-up either
    before_calls.clear()
    bench.versions_side_by_side(before, after, quick=True, threads=1, rounds=5)  # every group: 5 rounds, not its own
    assert before_calls == ["a"] * 6 + ["c"] * 6
    with pytest.raises(ValueError, match="rounds"):
        bench.versions_side_by_side(before, after, quick=True, threads=1, rounds=0)
    # the A/A control: a second copy of every after row, timed in the same rounds, and the spread it shows
    after_calls.clear()
    checked = bench.versions_side_by_side(before, after, quick=True, threads=1, control=True).set_index("benchmark")
    assert after_calls == ["a"] * 6 + ["c"] * 8  # after and its copy: warm-up + rounds each
    compared = checked.dropna(subset=["after/before"])
    assert (compared["again/after"] > 0).all()
    spread = np.maximum(compared["again/after"], 1 / compared["again/after"])
    best = np.minimum(compared["after_ms"], compared["again_ms"]) / compared["before_ms"]
    assert np.allclose(compared["best/before"], best)
    assert compared["beyond_spread"].tolist() == ((best > bench.SLOWER) & (best > spread)).tolist()


@pytest.mark.slow
def test_the_real_bench_side_by_side_with_itself_pairs_every_timed_row():
    table = bench.versions_side_by_side(bench, bench, quick=True, threads=1)
    timed = {r.name for rows, _ in bench._rows_of(bench, quick=True, threads=1) for r in rows if r.timing_of is None}
    assert set(table["benchmark"]) == timed and "only in" not in table
    assert (table["after/before"] > 0).all()


def test_the_old_versions_benchmarks_import_the_old_package_everywhere():
    from tools.bench_versions import renamed

    source = ("from workbench import fast\nimport workbench as wb\n\ndef f():\n"
              "    from workbench.analysis import x\n    import workbench_extra\n")
    assert renamed(source, "old") == ("from old import fast\nimport old as wb\n\ndef f():\n"
                                      "    from old.analysis import x\n    import workbench_extra\n")
