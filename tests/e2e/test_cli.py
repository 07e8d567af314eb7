"""End-to-end: the command line, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, perturbed_model, small_config
from workbench.checkpoint import save_checkpoint

pytestmark = pytest.mark.subprocess


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True,
                          check=check, timeout=600, env={"OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "")})


def test_help_lists_commands():
    out = run_cli("--help").stdout
    for command in ("info", "tasks", "train", "reproduce", "probe", "contraction", "traces"):
        assert command in out


def test_info_reports_config_params_metrics_and_d20_overhead(tmp_path):
    save_checkpoint(perturbed_model(small_config("lrt")), tmp_path / "ck", metrics={"val_loss": 2.5})
    report = json.loads(run_cli("info", str(tmp_path / "ck"), "--json").stdout)
    assert report["config"]["mechanism"] == "lrt"
    assert report["params"]["total"] == sum(v for k, v in report["params"].items() if k != "total")
    assert report["metrics"] == {"val_loss": 2.5}
    shared = next(r for r in report["d20"] if r["mechanism"] == "lrt" and r["lrt_projection"] == "shared")
    assert 3.2e6 < shared["extra_params"] < 3.4e6
    assert "Overhead at the nanochat d20 shape" in run_cli("info", str(tmp_path / "ck")).stdout


def test_info_on_a_broken_checkpoint_fails_clearly(tmp_path):
    result = run_cli("info", str(tmp_path / "missing"), check=False)
    assert result.returncode != 0 and "missing file" in result.stderr


@pytest.mark.slow
def test_bench_quick_json():
    """``make bench`` (``tools/bench.py``, outside the package) at its smoke sizes."""
    done = subprocess.run([sys.executable, str(REPO / "tools" / "bench.py"), "--quick", "--json", "--threads", "1"],
                          capture_output=True, text=True, timeout=600, check=True)
    rows = json.loads(done.stdout)
    names = [r["benchmark"] for r in rows]
    assert "decode 4x128 batch 1 KV cache" in names and "train step 4x128 LRT interleaved S=2" in names
    assert any(n.endswith("LRT soft") for n in names) and all(r["ms"] > 0 for r in rows)
    assert {r["benchmark"]: r["floor"] for r in rows}["train step 4x128 FBT 2-pass"] > 2


def test_tasks_lists_every_task_with_an_example():
    rows = json.loads(run_cli("tasks", "--json").stdout)
    import workbench.tasks as tasks

    assert [r["name"] for r in rows] == tasks.names()
    assert all(r["example"] for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("command,run,args,stem", [
    ("probe", "layer0_probes/delayed_memory_fbt", ["--n", "48", "--conditions", "standard", "suffix1",
                                                   "--no-random-baseline"], "probes"),
    ("contraction", "fbt_pass_mixes_registers/reg_75_22_3_s0", ["--n", "2", "--passes", "160"], "pass_dynamics"),
    ("traces", "reasoning_traces/fbt_s0", ["--n", "4", "--max-new-tokens", "24"], "traces"),
])
def test_analysis_commands_write_csv_and_png(tmp_path, command, run, args, stem):
    checkpoint = Path(__file__).resolve().parents[2] / "checkpoints" / run
    assert checkpoint.is_dir(), f"{run} is not shipped: point this test at a specimen that is"
    run_cli(command, str(checkpoint), *args, "--out", str(tmp_path))
    table = pd.read_csv(tmp_path / f"{stem}.csv")
    assert len(table) > 0 and (tmp_path / f"{stem}.png").stat().st_size > 1000
    if command == "contraction":  # exact after T = 152 passes (the prompt's length)
        assert table.loc[table["pass"] > 152, "delta"].eq(0).all() and table["delta"].iloc[1] > 0
    if command == "probe":
        assert set(table["condition"]) == {"standard", "suffix1"}


def test_analysis_command_without_a_recorded_task_asks_for_one(tmp_path):
    save_checkpoint(perturbed_model(small_config()), tmp_path / "ck")
    result = run_cli("probe", str(tmp_path / "ck"), "--out", str(tmp_path), check=False)
    assert result.returncode == 2 and "--task" in result.stderr
