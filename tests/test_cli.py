"""End-to-end: the command line, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import perturbed_model, small_config
from workbench.checkpoint import save_checkpoint


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True,
                          check=check, timeout=600, env={"OMP_NUM_THREADS": "1", "PATH": ""})


def test_help_lists_commands():
    out = run_cli("--help").stdout
    for command in ("info", "bench"):
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
    rows = json.loads(run_cli("bench", "--quick", "--json", "--threads", "1").stdout)
    names = [r["benchmark"] for r in rows]
    assert "decode 4x128 KV cache" in names and "train step 4x128 LRT interleaved S=2" in names
    assert all(r["ms"] > 0 for r in rows)


def test_tasks_lists_every_task_with_an_example():
    rows = json.loads(run_cli("tasks", "--json").stdout)
    import workbench.tasks as tasks

    assert [r["name"] for r in rows] == tasks.names()
    assert all(r["example"] for r in rows)
