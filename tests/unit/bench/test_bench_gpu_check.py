"""``make gpu-check`` (tools/gpu_check.py): plain about a missing GPU, and its checks kept runnable on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from workbench.schedules import SCHEDULES

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "gpu_check.py"


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_it_says_so_and_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _gpu_check().main([]) == 0
    out = capsys.readouterr().out
    assert "no GPU" in out and "nothing checked" in out and "PASS" not in out


def test_its_checks_run_and_pass_on_the_cpu(capsys):
    """The same checks at toy sizes: every invariant, a bf16 step per mechanism and schedule, a throughput line."""
    assert _gpu_check().main(["--device", "cpu", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and out.count("PASS  float32") == 12 and out.count("PASS  bf16 training step") \
        == 3 * len(SCHEDULES)  # each mechanism under each schedule
    assert "tokens/s" in out and "% of measured matmul" in out and "all checks passed" in out
