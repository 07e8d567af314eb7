"""The package computes without its extras (``lab``: jupyterlab, ipywidgets; ``hf``: transformers), and a front-end
that needs one says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
for name in ("ipywidgets", "transformers", "jupyterlab", "nbval"):
    sys.modules[name] = None  # as if not installed: importing it raises ImportError
import torch
import workbench as wb
model = wb.build_model(wb.ModelConfig(vocab_size=11, n_layer=1, n_head=1, n_embd=8, seq_len=4, mechanism="lrt"))
out = wb.schedules.Sequential().run(model, torch.zeros(1, 4, dtype=torch.long))
print(tuple(out.logits.shape))
try:
    import workbench.widgets
except ImportError as error:
    print(error)
"""


@pytest.mark.subprocess
def test_the_package_trains_and_runs_without_its_extras_and_names_the_extra_a_front_end_needs():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shape, message = done.stdout.strip().splitlines()[-2:]
    assert shape == "(1, 4, 11)"
    assert "workbench[lab]" in message
