"""causal_use's power checks hold on a fresh sample: a specimen the recipe found not to need its memory
still answers as well without it on examples neither the recipe nor training saw, and one it found to need
it still does.

The recipe draws "does not use" only where the memory is needed on the examples scored (suffix1 beats
standard) and an edit of the site moves answers; otherwise the verdict is "not tested". The check is the
gate's own decision (the interval's side of 0) on a fresh sample, not a pinned number, so it holds on any
CPU and thread count; an interval that touches 0 on the fresh sample is allowed for a recorded "needed"
only within ``MARGIN`` of accuracy.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench.checkpoint import load_checkpoint
from workbench.experiments import checkpoints_root
from workbench.experiments.probe_specimens import probe_task, run_name
from workbench.experiments.recipes import causal_use as recipe

FRESH_SEED = 7927  # neither the recipe's intervention seed nor a training or gate seed
FRESH_N = 256
MARGIN = 0.02  # accuracy: how far below 0 a recorded "needed" interval's fresh lower bound may fall

ROOT = checkpoints_root()
RESULTS = ROOT / recipe.RECIPE.name / "results.csv"
pytestmark = pytest.mark.skipif(not RESULTS.is_file(), reason="causal_use has not been reproduced here")


def _specimens() -> list[dict]:
    table = pd.read_csv(RESULTS)
    return table[table["part"] == "swap"].to_dict("records") if "part" in table else []


def test_every_verdict_passed_its_power_checks_or_says_not_tested():
    rows = _specimens()
    assert rows, "causal_use intervened on no specimen"
    for row in rows:
        powered = row["needed_low"] > 0 and row["site_moves"] > recipe.NEGLIGIBLE
        if row["verdict"] == "does not use":
            assert powered, row
        if not row["needed_low"] > 0:
            assert row["verdict"] == "not tested: feedback not needed", row
    summary = json.loads((ROOT / recipe.RECIPE.name / "summary.json").read_text())
    for task, verdict in summary["task_verdicts"].items():
        verdicts = {r["verdict"] for r in rows if r["task"] == task}
        assert verdict in verdicts or verdict.startswith(("mixed", "not tested")), (task, verdict, verdicts)


@pytest.mark.slow
@pytest.mark.parametrize("row", _specimens() if RESULTS.is_file() else [],
                         ids=lambda r: f"{r['task']}-{r['scratch_updates']}")
def test_the_needs_memory_gate_holds_on_a_fresh_sample(row):
    model = load_checkpoint(ROOT / recipe.SPECIMENS / run_name(row["task"], "fbt"))
    fresh = probe_task(row["task"], int(row["scratch_updates"])).sample(FRESH_N, FRESH_SEED, "val")
    needed = recipe.memory_needed(model, fresh, seed=0)
    if row["needed_low"] > 0:
        assert needed["low"] > -MARGIN, (row, needed)
    else:  # recorded as not needed: the memory does not buy a clear accuracy gain on fresh examples either
        assert needed["low"] <= 0 or needed["mean"] < MARGIN, (row, needed)
