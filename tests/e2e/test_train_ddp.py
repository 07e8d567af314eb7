"""Distributed training: ``torchrun --nproc_per_node 2`` on CPU (gloo) follows the same loss curve as
one process with the same global batch, and only rank 0 writes the run directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.train import train
from workbench.train_config import TrainConfig

pytestmark = pytest.mark.subprocess

# Unequal lengths and interleaved subsets: each process's slice holds a different number of targets
# per pass, so agreement needs the exact per-pass weighting and a true gradient all-reduce. AdamW
# because Muon's bfloat16 Newton-Schulz step would turn summation-order noise into 1e-3 differences.
CONFIG = TrainConfig(task="running_sum", task_params=dict(p=5, length=16, min_length=4),
                     model=dict(n_layer=2, n_head=2, n_embd=32, mechanism="lrt"), schedule="interleaved",
                     optimizer="adamw", steps=8, batch_size=8, eval_size=16, log_every=1, progress=False)
FLAGS = ["--task", "running_sum", "--task-param", "p=5", "--task-param", "length=16",
         "--task-param", "min_length=4", "--n-layer", "2", "--n-head", "2", "--n-embd", "32",
         "--mechanism", "lrt", "--schedule", "interleaved", "--optimizer", "adamw", "--steps", "8",
         "--batch-size", "8", "--eval-size", "16", "--log-every", "1", "--no-progress"]


def test_two_processes_match_one(tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # two micro-batches per process: 4 micro-batches in all against one in the reference run
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "-m", "workbench", "train", *FLAGS, "--grad-accum", "2",
                           "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("done (steps)") == 1  # rank 0 reports; rank 1 stays quiet
    written = sorted(p.name for p in out.iterdir())
    assert written == ["checkpoint", "history.csv", "loss.png", "train_config.json"]
    ddp = pd.read_csv(out / "history.csv")
    assert TrainConfig.from_json((out / "train_config.json").read_text()) == CONFIG.replace(
        grad_accum=2, out_dir=str(out))

    single = train(CONFIG).history
    assert list(ddp["step"]) == list(single["step"]) == list(range(1, 9))
    assert list(ddp["flops"]) == list(single["flops"]) and list(ddp["tokens"]) == list(single["tokens"])
    for col in ("loss", "loss_pass1", "loss_pass2", "loss_pass3", "grad_norm"):
        np.testing.assert_allclose(ddp[col], single[col], rtol=1e-4, err_msg=col)
    np.testing.assert_allclose(ddp["val_loss"].iloc[-1], single["val_loss"].iloc[-1], rtol=1e-4)
    assert ddp["loss"].iloc[-1] < ddp["loss"].iloc[0]
