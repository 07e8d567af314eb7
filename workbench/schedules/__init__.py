"""Schedules: how a sequence is computed when every position reads its predecessor's memory. Each is a value that
knows its reads, KV-cache fill, training batch and real ``flops``, so no caller asks which class it holds."""


from .conditions import CONDITION_FORMS, condition, condition_name
from .output import ScheduleOutput, feedback_mask, pass_masks, shift_right
from .parse import KNOBS, SCHEDULES, VALUES, parse
from .pass_mix import PassMix
from .prefilled import REGIMES, Prefilled, regime
from .recurrence import carry, continuation, iterate_passes, jacobi_pass, recur
from .values import Blockwise, FixedPoint, Interleaved, Multipass, Schedule, Sequential, Single, run

__all__ = ["CONDITION_FORMS", "KNOBS", "REGIMES", "SCHEDULES", "VALUES", "Blockwise", "FixedPoint", "Interleaved",
           "Multipass", "PassMix", "Prefilled", "Schedule", "ScheduleOutput", "Sequential", "Single", "carry",
           "condition", "condition_name", "continuation", "feedback_mask", "iterate_passes", "jacobi_pass",
           "parse", "pass_masks", "recur", "regime", "run", "shift_right"]
