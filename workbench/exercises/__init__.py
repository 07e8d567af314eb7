"""Exercise checks: a notebook calls one right after the learner's code, and it says what is wrong.

ARENA's pattern (objectives, an exercise, a test right after it, a solution opened only when
wanted), with the package doing the testing: every ``check_*`` takes the learner's function, runs
it on small inputs where a mistake shows (float64 models with every weight off its zero init,
data built so that the usual slip changes the answer) and compares it with what the package
computes. A wrong answer raises ``AssertionError`` with a message that says where it differs and
what to look at; a right one prints ``ok: ...``. A check never fixes or hides an error the
learner's function raises, with one exception: the stub itself.

The learner's cell starts as a stub that raises ``NotImplementedError``. Given the stub, a check
prints ``not done yet: ...`` (what to write, where the hints are) instead of failing, and hands back
the reference solution from :mod:`workbench.exercises.solutions`; given a function that passes, it
hands back that function. A notebook therefore writes ``fn = ex.check_x(fn)``: Run All works on a
fresh notebook (CI executes the committed notebooks so), the cells below the check use the
learner's function once it passes, and a wrong answer stops the notebook at its check.

Modules: ``framework`` (``exercise``, ``CHECKS``, the practice model), the checks by subject
(``model_checks``, ``schedule_checks``, ``probe_checks``, ``analysis_checks``) and ``solutions``.

Checks, by notebook (the solution of each is ``solutions.<name>``):

- 00: ``check_relative_distance(fn)`` — a schedule's relative distance to the exact logits (``relative_distance``);
- 01: ``check_rope(fn)`` — one vector rotated by RoPE at one position, by hand (``rope``);
- 01: ``check_kv_cache_bytes(fn)`` — the bytes a KV cache's keys and values take (``kv_cache_bytes``);
- 01: ``check_kv_cache_step(fn)`` — logits from a prefill plus one-token steps through a KV cache (``cached_logits``);
- 02: ``check_memory_read(fn)`` — the memory m_{t-1} an LRT position reads, from the residual stream (``memory_read``);
- 02: ``check_lrt_kv_injection(fn)`` — LRT's gated recurrent keys/values for one block (``gated_kv``);
- 02: ``check_pooled_memory(fn)`` — LRT's pooled memory unrolled into weights on the source states (``pooled_weights``);
- 03: ``check_mean_passes(fn)`` — a pass mix's expected pass count, what a step costs (``mean_passes``);
- 03: ``check_token_flops(fn)`` — the training FLOPs of one token in one pass, the trainer's account (``token_flops``);
- 03: ``check_gauss_seidel_sweep(fn)`` — one interleaved sweep with write-back (``sweep``);
- 04: ``check_glu_fusion(fn)`` — FBT's fused input by hand (``glu_fusion``);
- 04: ``check_jacobi_pass(fn)`` — one pass of the pass map (``jacobi_pass``);
- 04: ``check_soft_logits(fn)`` — SOFT decoding's logits, the exact recurrence after a plain prompt (``soft_logits``);
- 06: ``check_residual(fn)`` — the relative residual between consecutive passes (``residual``);
- 06: ``check_one_step_jacobian(fn)`` — the token recurrence's one-step Jacobian (``one_step_jacobian``);
- 06: ``check_lyapunov_2x2(fn)`` — the top Lyapunov exponent of a 2x2 linear recurrence (``lyapunov_2x2``);
- 05: ``check_majority_rate(fn)`` — the majority baseline a probe must beat, per grouped fold (``majority_rate``);
- 05: ``check_grouped_cv_probe(fn)`` — a grouped cross-validated probe (``grouped_cv_probe``);
- 05: ``check_layer_features(fn)`` — one depth and pass of an activation cache, at each example's position
  (``layer_features``);
- 05b: ``check_flip_rate(fn)`` — the share of answers an edit flips, answer against foil (``flip_rate``);
- 05b: ``check_swap_patch(fn)`` — one example reading a group mate's memory (``swap_patch``);
- 05b: ``check_paired_interval(fn)`` — a paired difference's interval, whole groups resampled (``paired_interval``);
- 07: ``check_trace_length(fn)`` — a continuation's trace length (``trace_length``);
- 07: ``check_decode_forwards(fn)`` — the forwards a decode costs under a regime (``decode_forwards``);
- 07: ``check_median_length_difference(fn)`` — per-seed median length differences, averaged
  (``median_length_difference``);
- 08: ``check_verdict(fn)`` — a recipe's verdict from its interval (``read_verdict``);
- 09: ``check_hf_fusion(fn)`` — the GLU fusion of the Hugging Face wrapper (``hf_fused_input``).
"""

from . import solutions
from .analysis_checks import (
    check_decode_forwards,
    check_lyapunov_2x2,
    check_median_length_difference,
    check_trace_length,
    check_verdict,
)
from .framework import CHECKS
from .model_checks import (
    check_glu_fusion,
    check_hf_fusion,
    check_kv_cache_bytes,
    check_kv_cache_step,
    check_lrt_kv_injection,
    check_memory_read,
    check_pooled_memory,
    check_rope,
)
from .probe_checks import (
    check_flip_rate,
    check_grouped_cv_probe,
    check_layer_features,
    check_majority_rate,
    check_paired_interval,
    check_swap_patch,
)
from .schedule_checks import (
    check_gauss_seidel_sweep,
    check_jacobi_pass,
    check_mean_passes,
    check_one_step_jacobian,
    check_relative_distance,
    check_residual,
    check_soft_logits,
    check_token_flops,
)

__all__ = ["CHECKS", "check_gauss_seidel_sweep", "check_glu_fusion", "check_grouped_cv_probe", "check_hf_fusion",
           "check_jacobi_pass", "check_kv_cache_step", "check_lrt_kv_injection", "check_lyapunov_2x2",
           "check_mean_passes", "check_one_step_jacobian", "check_relative_distance", "check_residual",
           "check_soft_logits", "check_swap_patch", "check_trace_length", "check_verdict", "solutions",
           "check_decode_forwards", "check_flip_rate", "check_layer_features", "check_majority_rate",
           "check_median_length_difference", "check_paired_interval"]
__all__ += ["check_kv_cache_bytes", "check_memory_read", "check_pooled_memory", "check_rope", "check_token_flops"]
