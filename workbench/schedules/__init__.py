"""Schedules: how a whole sequence is computed when every position reads its predecessor's memory.

Every mechanism runs under every schedule. ``Single()``: one plain pass. ``Sequential()``: exact, token by token through
the KV cache (the ground truth and the decoding path). ``Multipass(K)``: Jacobi; pass k reads pass k-1's memory shifted
by one, so it is exact for the first k positions (FBT's training). ``Interleaved(S)``: Gauss-Seidel over strided
subsets, written back without detach (LRT's training). ``Blockwise(B)``: only a block's first position reads memory (the
LRT paper's coarse control). ``FixedPoint(K)`` (ours): Jacobi passes without gradient to the fixed point, then one pass
with gradient from that detached state, as equilibrium models' Jacobian-free backpropagation does.

Decoding and probing use the same values: ``Prefilled(prefill, then)`` computes a prompt under one schedule and the rest
token by token, as ``decode.generate`` does (``regime(...)`` gives STANDARD, SOFT and FUSED). Each value says which
positions read memory, how it fills a KV cache, what a training batch runs and which pass losses are its final estimate,
so no caller asks which class it holds. ``value.flops`` counts the work each really does, for comparisons at matched
compute."""


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
