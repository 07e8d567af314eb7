"""Schedules: how a whole sequence is computed when every position reads its predecessor's memory.

Every mechanism runs under every schedule (for ``mechanism="none"`` the memory is simply unused):

- ``Single()``: one plain pass, no feedback (memory is absent everywhere).
- ``Sequential()``: exact. Token by token through the KV cache, the memory carried from one step to
  the next — the ground truth and the decoding path.
- ``Multipass(K)``: Jacobi. Pass 1 is plain; pass k reads pass k-1's memory shifted right by
  one. A causal system, so pass k is exact for the first k positions and ``K = T`` is exact (FBT's
  training objective).
- ``Interleaved(S)``: Gauss–Seidel over strided subsets (LRT's training). An init pass
  fills a buffer of every layer's K/V and of the memory; subset s (``t % S == s``) is recomputed
  against the buffer with the latest shifted memory, and its K/V and memory are written back
  without detach. ``S = T`` is exact.
- ``Blockwise(B)``: contiguous blocks in order through the KV cache; only the first position
  of a block reads memory (from the previous block's last position). The coarse control of the LRT
  paper; ``B = 1`` is ``sequential`` and ``B = T`` is ``single``.
- ``FixedPoint(K)``: training *at* the fixed point (ours, beyond both papers): a plain pass
  with gradient, then up to K Jacobi passes without gradient (in eval mode, stopped once the
  relative residual falls below ``tol``), then one pass with gradient from that detached state, as
  equilibrium models' Jacobian-free backpropagation does. Every pass map measured here contracts,
  so this trains the model on the state the exact recurrence reaches. ``K >= T`` is exact.

Decoding and probing are written in the same values, never re-implemented by the module that needs them:
``Prefilled(prefill, then)`` computes a prompt under one schedule and the rest token by token, as
``decode.generate`` does. The decoding regimes are ``regime(...)``: STANDARD = ``Single()``, SOFT =
``Prefilled(Single())`` (equal to ``Sequential`` with ``plain_prefix`` = the prompt's length, but
computed as the decoder does, bit for bit), FUSED = ``Prefilled(Multipass(1 + prefill_passes))``; a
probe's k-step recurrent suffix is SOFT from ``label_pos - k + 1``, ``Prefilled(suffix=k)`` anchored at each label
(``condition`` reads the probes' condition names; any value is a probe condition). Every value says which positions
read memory (``reads``), how it fills a KV cache (``prefill``), what a training batch runs (``draw``)
and which pass losses are its final estimate (``final_passes``), so no caller asks which class it
holds. One carry step (``carry``) and one Jacobi pass (``jacobi_pass``) underlie all of them.

Each returns a ``ScheduleOutput`` whose ``loss(targets)`` is that schedule's training objective
(multi-pass: ``NTP_1 + lambda * mean_{k>=2} NTP_k``; interleaved: the mean over the 1 + S passes).
``value.flops(model, batch, seq_len)`` counts the work each one really does, for comparisons at matched
compute. Modules: ``output`` (the objective, feedback masks), ``recurrence`` (the primitives), ``values`` (the
algorithms), ``pass_mix`` (FBT's training sampler), ``prefilled`` (decoding), ``conditions`` (probes), ``parse``.
"""


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
