"""Exercise checks: a notebook calls one right after the learner's code, and it says what is wrong.

Each ``check_*`` runs the learner's function on small inputs built so the usual slip shows (float64 models with every
weight off its zero init) and compares it with the package: a wrong answer raises ``AssertionError`` saying where it
differs, a right one prints ``ok: ...``. Given the stub (its body raises ``NotImplementedError``) a check prints
``not done yet: ...`` and returns the reference from ``solutions``, else it returns the learner's function; so a
notebook writes ``fn = ex.check_x(fn)`` and Run All works on a fresh copy. Modules: ``framework`` and the checks by
subject.
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
