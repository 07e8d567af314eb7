"""The shipped FBT text specimens (``fbt_text``) still do what their recipe recorded, on text nobody evaluated.

The recipe's feedback gate reads each arm's held-out pass-2 minus pass-1 bits/byte on windows drawn with
``EVAL_SEED``. Here every FBT arm's seeds are reloaded and scored the same way (``fbt_language.score_run``'s pass
measures) on ``FRESH_N`` windows drawn with another seed: an arm recorded as using its feedback (interval below 0)
must show it again, the whole interval below 0; one recorded as not using it must not clear that bar. The check is
an interval on fresh data, not a pinned number, so it holds on any x86-64 CPU and thread count. The scores the
readers use must belong to the shipped weights.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from test_specimens_lrt_text import MARGIN

from workbench.analysis.jacobians import lyapunov
from workbench.evaluation import paired_difference, per_example_metrics
from workbench.experiments import checkpoints_root, load_run
from workbench.experiments import fbt_language as lang
from workbench.experiments.core import EVAL_SEED
from workbench.experiments.recipes import fbt_fixed_point_text, fbt_text
from workbench.experiments.runs import spec_of
from workbench.schedules import Multipass

FRESH_SEED = 6007  # neither a training seed nor the recorded evaluation's (EVAL_SEED)
FRESH_N = 64
OUT = checkpoints_root() / lang.SPECIMENS
shipped = pytest.mark.skipif(not (OUT / "summary.json").is_file(), reason="fbt_text has not been reproduced here")


@shipped
def test_the_scores_belong_to_the_shipped_weights():
    scores = pd.read_csv(OUT / lang.SCORES)
    runs = json.loads((OUT / "summary.json").read_text())["runs"]
    assert set(scores["run"]) == set(runs) == {s.name for s in fbt_text.build(1.0)}
    for run, weights in scores.groupby("run")["weights"].first().items():
        assert weights == lang.weights_id(OUT / run), run


@shipped
@pytest.mark.parametrize("arm", fbt_text.FBT_ARMS)
def test_the_feedback_gate_holds_on_fresh_text(arm):
    torch.set_num_threads(1)
    recorded = lang.feedback_used(pd.read_csv(OUT / lang.SCORES), arm)
    rows = []
    for seed in fbt_text.seeds_of(arm):  # every seed the recorded gate read
        run = fbt_text.run_name(arm, seed)
        batch = spec_of(OUT / run).eval_task().sample(FRESH_N, FRESH_SEED, "val")
        model = load_run(lang.SPECIMENS, run)
        for k in (1, 2):
            frame = per_example_metrics(model, batch, Multipass(k))
            rows.append(pd.DataFrame({"arm": arm, "seed": seed, "example": frame["example"], "measure": f"pass{k}",
                                      "bpb": frame["loss"]}))
    fresh = lang.feedback_used(pd.concat(rows), arm)
    assert FRESH_SEED != EVAL_SEED
    if recorded["high"] < 0:
        assert fresh["high"] < 0, (arm, recorded, fresh)
    else:
        assert fresh["high"] >= 0, (arm, recorded, fresh)



@shipped
def test_the_baseline_gate_holds_on_fresh_text():
    """The recipe's first gate (every equal-step baseline seed at least ``UNIGRAM_MARGIN`` bits/byte below the
    unigram bits/byte), on fresh windows: the whole 95 % interval of each seed's mean below that bar, loosened by
    the sampling margin the LRT text specimens use."""
    torch.set_num_threads(1)
    for arm, seed in [(a, seed) for a in ("base", f"base_x{lang.LONG}") for seed in fbt_text.seeds_of(a)]:
        run = fbt_text.run_name(arm, seed)  # the gate reads both equal-step baselines
        task = spec_of(OUT / run).eval_task()
        frame = per_example_metrics(load_run(lang.SPECIMENS, run), task.sample(FRESH_N, FRESH_SEED, "val"),
                                    Multipass(1))
        bpb = frame["loss"].to_numpy() / math.log(2)
        high = paired_difference(np.zeros_like(bpb), bpb)["high"]
        assert high <= task.unigram_loss() / math.log(2) - fbt_text.UNIGRAM_MARGIN + MARGIN, (run, high)


FIXED_POINT = checkpoints_root() / fbt_fixed_point_text.RECIPE.name


@pytest.mark.skipif(not (FIXED_POINT / "results.csv").is_file(), reason="fbt_fixed_point_text has not run here")
def test_the_text_recurrence_forgets_a_perturbation_on_fresh_windows():
    """``fbt_fixed_point_text`` records each text FBT arm's top Lyapunov exponent; the GLU notebook 04 teaches on
    (``glu_full_s0``, whose fixed point its arm cannot read) shows the sign of its arm's again on windows nobody
    measured: every fresh window's exponent below 0, so its unreadable fixed point is not an instability."""
    torch.set_num_threads(1)
    recorded = pd.read_csv(FIXED_POINT / "results.csv").set_index("arm")
    assert recorded.loc["glu_full", "lyapunov_max"] < 0
    run = fbt_text.run_name("glu_full", 0)
    tokens = spec_of(OUT / run).eval_task().sample(fbt_fixed_point_text.LYAPUNOV_WINDOWS, FRESH_SEED, "val").tokens
    exps = lyapunov(load_run(lang.SPECIMENS, run), tokens.long(), t0=(3 * tokens.size(1)) // 4)
    final = exps[exps["horizon"] == exps["horizon"].max()]["exponent"]
    assert len(final) == fbt_fixed_point_text.LYAPUNOV_WINDOWS and (final < 0).all(), final.tolist()
