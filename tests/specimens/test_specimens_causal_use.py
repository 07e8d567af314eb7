"""causal_use's verdicts hold on a fresh sample: a specimen the recipe found not to need its memory still
answers as well without it on examples neither the recipe nor training saw (one it found to need it still
does), and a swap of the memory stream that flipped answers beyond its control still does.

The recipe draws "uses" where a label-mate swap flips answers beyond its same-label control, needed or not;
"does not use" only where the memory is needed on the examples scored (the design's fed condition beats the
plain pass) and an edit of the site moves answers; otherwise the verdict is "not tested". Each check is the
rule's own decision (an interval's side of 0) on a fresh sample, not a pinned number, so it holds on any CPU
and thread count; an interval that touches 0 on the fresh sample is allowed for a recorded "needed" only
within ``MARGIN`` of accuracy.
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
        if row["verdict"] in ("uses", "partly uses"):
            assert row["diff_low"] > 0, row
        elif row["verdict"] == "does not use":
            assert powered and row["controls_detect"], row
        elif not row["needed_low"] > 0:
            assert row["verdict"] == "not tested: feedback not needed", row
    summary = json.loads((ROOT / recipe.RECIPE.name / "summary.json").read_text())
    table = pd.DataFrame(rows)
    for task, verdict in summary["task_verdicts"].items():
        mine = table[table["task"] == task]
        assert verdict == (recipe.task_verdict(mine) if len(mine) else "not tested: no gated specimen"), task


def _resting_on_need() -> list[dict]:
    """The rows whose verdict the needs-memory gate decided (a swap that flipped answers needs no gate)."""
    return [r for r in _specimens() if r["verdict"] not in ("uses", "partly uses")] if RESULTS.is_file() else []


@pytest.mark.slow
@pytest.mark.parametrize("row", _resting_on_need(),
                         ids=lambda r: f"{r['task']}-{r['seed']}-{r['scratch_updates']}-{r['design']}")
def test_the_needs_memory_gate_holds_on_a_fresh_sample(row):
    model = load_checkpoint(ROOT / recipe.SPECIMENS / run_name(row["task"], "fbt", int(row["seed"])))
    fresh = probe_task(row["task"], int(row["scratch_updates"])).sample(FRESH_N, FRESH_SEED, "val")
    needed = recipe.memory_needed(model, fresh, seed=0, condition=recipe.DESIGNS[row["design"]][0])
    if row["needed_low"] > 0:
        assert needed["low"] > -MARGIN, (row, needed)
    else:  # recorded as not needed: the memory does not buy a clear accuracy gain on fresh examples either
        assert needed["low"] <= 0 or needed["mean"] < MARGIN, (row, needed)


@pytest.mark.slow
def test_a_stream_swap_that_flipped_answers_still_does_on_a_fresh_sample():
    """The shortest specimen the recipe found to use its memory stream: on 64 fresh examples the label-mate
    swap still flips more answers than its control (the rule's own side of 0)."""
    used = [r for r in _specimens() if r["design"] == "stream" and r["verdict"] in ("uses", "partly uses")]
    if not used:
        pytest.skip("causal_use found no stream design that uses its memory")
    row = min(used, key=lambda r: r["scratch_updates"])
    model = load_checkpoint(ROOT / recipe.SPECIMENS / run_name(row["task"], "fbt", int(row["seed"])))
    fresh = probe_task(row["task"], int(row["scratch_updates"])).sample(64, FRESH_SEED, "val")
    again = recipe.design_row(model, fresh, "stream", seed=0)
    assert again["diff_low"] > 0, (row["specimen"], again["diff_low"], again["diff_high"])
