"""Training histories of different schedules put on one scale.

A multi-pass run logs the loss of each pass; a single-pass run one loss. ``final_estimate_history`` reads
each history as the loss of the run's final estimate (the passes its schedule counts as final), so
curves of different schedules can share an axis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .. import schedules
from ..train_config import TrainConfig


def final_estimate_history(history: pd.DataFrame, train_config: Mapping[str, Any]) -> pd.DataFrame:
    """A training history whose ``loss`` is the loss of the estimate the schedule outputs (the objective kept as
    ``objective``), so runs trained under different schedules share one y-axis.

    The objective is not comparable across schedules: multipass's is ``NTP_1 + lambda mean_{k>=2} NTP_k``
    (about twice a per-token loss), interleaved's the mean over its init pass and S subsets. The final
    estimate is pass K for multipass (each row's own ``passes``), the S refined subsets for interleaved
    (their mean: exact when the subsets carry equal numbers of targets), the one pass otherwise.
    ``train_config``: the run's ``TrainConfig`` as a dict (``metrics.json``'s ``train_config``).
    """
    needed = ["loss", "loss_pass1", "passes"]
    missing = [c for c in needed if c not in history.columns]
    if missing:
        raise ValueError(f"history needs columns {needed}; missing {missing}")
    name = train_config.get("schedule")
    if name not in schedules.SCHEDULES:
        raise ValueError(f"train_config['schedule']={name!r} is invalid: must be one of {schedules.SCHEDULES}")
    schedule = TrainConfig.from_dict(dict(train_config)).schedule_value()
    out = history.assign(objective=history["loss"])
    passes = history["passes"].astype(int)
    for k in passes.unique():  # the final estimate's pass losses differ with the batch's depth under a mix
        rows = passes == k
        columns = [f"loss_pass{p}" for p in schedule.final_passes(int(k))]
        present = [c for c in columns if c in history.columns]
        final = history.loc[rows, present].mean(axis=1) if present else history.loc[rows, "loss_pass1"] * np.nan
        out.loc[rows, "loss"] = final.fillna(history.loc[rows, "loss_pass1"])  # steps trained single (feedback_start)
    return out
