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

Checks, by notebook (the solution of each is ``solutions.<name>``):

- 00: ``check_relative_distance(fn)`` — a schedule's relative distance to the exact logits (``relative_distance``);
- 01: ``check_kv_cache_step(fn)`` — logits from a prefill plus one-token steps through a KV cache (``cached_logits``);
- 02: ``check_lrt_kv_injection(fn)`` — LRT's gated recurrent keys/values for one block (``gated_kv``);
- 03: ``check_gauss_seidel_sweep(fn)`` — one interleaved sweep with write-back (``sweep``);
- 04: ``check_glu_fusion(fn)`` — FBT's fused input by hand (``glu_fusion``);
- 04/06: ``check_jacobi_pass(fn)`` — one pass of the pass map (``jacobi_pass``);
- 06: ``check_one_step_jacobian(fn)`` — the token recurrence's one-step Jacobian (``one_step_jacobian``);
- 05: ``check_grouped_cv_probe(fn)`` — a grouped cross-validated probe (``grouped_cv_probe``);
- 05b: ``check_swap_patch(fn)`` — one example reading a group mate's memory (``swap_patch``);
- 07: ``check_trace_length(fn)`` — a continuation's trace length (``trace_length``);
- 08: ``check_verdict(fn)`` — a recipe's verdict from its interval (``read_verdict``);
- 09: ``check_hf_fusion(fn)`` — the GLU fusion of the Hugging Face wrapper (``hf_fused_input``).
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .. import schedules
from ..analysis.interventions import Intervention, intervene
from ..analysis.probes import fit_probe, random_init_model
from ..analysis.schedule_agreement import compare_schedules
from ..analysis.traces import read_trace
from ..config import ModelConfig
from ..evaluation import verdict
from ..functional import norm
from ..mechanisms import Feedback
from ..model import GPT, build_model, eval_mode
from ..tasks import ANSWER_MARKER, Task
from ..tasks import get as get_task
from . import solutions

VOCAB, T = 29, 9  # small enough to run in a blink, long enough that strided subsets are uneven


def practice_model(mechanism: str = "none", seed: int = 0, **overrides: object) -> GPT:
    """A tiny float64 model with every matrix redrawn (``random_init_model``), in eval mode.

    A freshly built model zeroes its output projections and LRT's recurrent projections, so a
    wrong answer could agree with the right one by accident; here every path carries signal. LRT
    starts at ``gamma = 0.5`` for the same reason.
    """
    config = ModelConfig(vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=16, seq_len=T, mechanism=mechanism,
                         tie_embeddings=mechanism == "fbt", lrt_gamma_init=0.5, **overrides)
    return random_init_model(build_model(config, dtype=torch.float64), seed=seed)


def _tokens(batch: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, T), generator=torch.Generator().manual_seed(seed))


def _close(got: object, expected: torch.Tensor, what: str, hint: str, atol: float = 1e-8) -> None:
    """``got`` must be a tensor of ``expected``'s shape and values; otherwise say where it is not."""
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor of shape {tuple(expected.shape)}, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    diff = (got.detach().to(expected.dtype) - expected).abs()
    if not bool(diff.max() <= atol):
        if diff.ndim >= 2:  # (B, T, ...): name the positions that are off
            bad = (diff.flatten(2).amax(-1) if diff.ndim > 2 else diff).amax(0) > atol
            where = f" at positions {bad.nonzero().flatten().tolist()}"
        else:
            where = ""
        raise AssertionError(f"{what}: differs{where} (largest difference {float(diff.max()):.3g}). {hint}")


def _passed(what: str) -> None:
    print(f"ok: {what}")


def _raised_by(error: BaseException, fn: Callable) -> bool:
    """Whether ``error`` was raised in ``fn``'s own body (the stub), not somewhere it calls."""
    code, tb = getattr(fn, "__code__", None), error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code is code


def exercise(solution: Callable) -> Callable[[Callable], Callable]:
    """Make ``check(fn, ...)`` an exercise check: it returns ``fn`` once ``fn`` passes, and while ``fn`` is
    still the stub (its body raises ``NotImplementedError``) it prints ``not done yet: ...`` and returns
    ``solution``, so that the cells after the check run. Any other error, a wrong answer's
    ``AssertionError`` included, propagates."""
    def wrap(check: Callable[..., None]) -> Callable[..., Callable]:
        @functools.wraps(check)
        def run(fn: Callable, *args: Any, **kwargs: Any) -> Callable:
            try:
                check(fn, *args, **kwargs)
            except NotImplementedError as error:
                if not _raised_by(error, fn):
                    raise
                name = getattr(fn, "__name__", "your function")
                said = f" ({error})" if str(error) else ""
                print(f"not done yet: {name} is still the stub{said}. Write it in the cell above (the hints "
                      f"are folded under it), then run this cell again. Until it passes, the cells below use "
                      f"the reference solution, wb.exercises.solutions.{solution.__name__}.", file=sys.stdout)
                return solution
            return fn
        run.solution = solution
        return run
    return wrap


CHECKS: dict[str, Callable] = {}  # every exercise check by name, filled below (tests run each on its solution)


def _register(check: Callable) -> Callable:
    CHECKS[check.__name__] = check
    return check


# ---------------------------------------------------------------------------------------------- 01
@_register
@exercise(solutions.cached_logits)
def check_kv_cache_step(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor], model: GPT | None = None) -> Callable:
    """``fn(model, idx, prefill)``: prefill ``idx[:, :prefill]`` into a fresh KV cache in one forward,
    then feed one token per forward; return the logits of every position (B, T, V).

    Compared with one full forward ``model(idx)`` for several prefill lengths, on a random baseline
    model (and on ``model`` too when given: a trained one).
    """
    models = [practice_model("none")] + ([] if model is None else [model])
    hint = ("Each one-token step must pass its absolute position (positions=torch.tensor([t])) and the "
            "same cache (kv=cache): without the position RoPE rotates it as position 0; without the cache "
            "it attends to nothing before it.")
    for m in models:
        idx = _tokens() % m.config.vocab_size
        with torch.no_grad(), eval_mode(m):
            expected = m(idx)
            for prefill in (1, 4, T - 1):
                tol = 1e-8 if expected.dtype == torch.float64 else 1e-4
                _close(fn(m, idx, prefill), expected, f"prefill={prefill}", hint, atol=tol)
    _passed("prefill + one-token steps through the cache = one full forward")


# ---------------------------------------------------------------------------------------------- 02
@_register
@exercise(solutions.gated_kv)
def check_lrt_kv_injection(fn: Callable[[GPT, int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                                        tuple[torch.Tensor, torch.Tensor]]) -> Callable:
    """``fn(model, layer, x, k, v, memory)``: LRT's keys and values for block ``layer`` (B, T, kv_heads, hd).

    ``x`` is the block's normed input, ``k``/``v`` its local keys/values, ``memory`` the (already
    shifted) ``m_{t-1}``. Compared with ``LRT.inject_kv`` for the shared and the per-layer projection.
    """
    hint = ("gates = 2 * sigmoid(W_gate x[..., :C]) give g_local and g_feedback per kv head; "
            "k~ = g_local * k + g_feedback * (W_k^rec m), likewise v, with the layer's (or the shared) projection.")
    for projection in ("shared", "per_layer"):
        model = practice_model("lrt", lrt_projection=projection)
        c = model.config
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(2, T, c.n_embd, generator=gen, dtype=torch.float64)
        k, v = (torch.randn(2, T, c.kv_heads, c.head_dim, generator=gen, dtype=torch.float64) for _ in range(2))
        memory = torch.randn(2, T, c.n_embd, generator=gen, dtype=torch.float64)
        for layer in range(c.n_layer):
            with torch.no_grad():
                want_k, want_v, _ = model.mechanism.inject_kv(layer, x, k, v, Feedback(memory))
                got = fn(model, layer, x, k, v, memory)
            if not isinstance(got, tuple) or len(got) != 2:
                raise AssertionError(f"fn must return (keys, values), got {type(got).__name__}")
            _close(got[0], want_k, f"keys, {projection} projection, layer {layer}", hint)
            _close(got[1], want_v, f"values, {projection} projection, layer {layer}", hint)
    _passed("gated recurrent keys and values match LRT.inject_kv (shared and per-layer projections)")


# ---------------------------------------------------------------------------------------------- 03
@_register
@exercise(solutions.sweep)
def check_gauss_seidel_sweep(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor]) -> Callable:
    """``fn(model, idx, subsets)``: logits (B, T, V) of one interleaved sweep with write-back.

    An init pass fills a ``KVBuffer``; subset s (positions ``t % S == s``) is then recomputed against
    it reading ``m_{t-1}`` from the latest estimate — written back by subset s-1 in this sweep, or
    the init pass for subset 0 — and its K/V and memory are written back. Compared with
    ``schedules.interleaved`` for LRT and FBT, S = 1, 2, 3 and T (where it is exact).
    """
    hint = ("Subset s must read the memory that subset s-1 wrote back in this sweep (subset 0: the init "
            "pass, shifted by one; position 0 reads none), and the refined keys/values must go back into the "
            "buffer (model.step(..., positions=buffer.refine(s), kv=buffer)).")
    for mechanism in ("lrt", "fbt"):
        model = practice_model(mechanism)
        idx = _tokens()
        for subsets in (1, 2, 3, T):
            with torch.no_grad():
                expected = schedules.interleaved(model, idx, subsets).logits
                _close(fn(model, idx, subsets), expected, f"{mechanism}, subsets={subsets}", hint)
    _passed("your sweep matches schedules.interleaved for LRT and FBT, S = 1, 2, 3 and T")


# ---------------------------------------------------------------------------------------------- 04
@_register
@exercise(solutions.glu_fusion)
def check_glu_fusion(fn: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor],
                     model: GPT | None = None) -> Callable:
    """``fn(model, tokens, memory)``: FBT's fused input u (B, T, D) from the token ids and ``m_{t-1}``.

    Compared with ``FBT.fuse_input`` (every position reads memory here) on a random FBT model, and
    on ``model`` when given.
    """
    hint = ("u = RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))): the state on the value path (W_U), the token "
            "embedding, normed, through the gate (W_G); RMSNorm is wb.functional.norm.")
    models = [practice_model("fbt")] + ([] if model is None else [model])
    for m in models:
        c = m.config
        tokens = _tokens() % c.vocab_size
        memory = norm(torch.randn(tokens.size(0), T, c.n_embd, generator=torch.Generator().manual_seed(2),
                                  dtype=m.wte.weight.dtype))
        with torch.no_grad(), eval_mode(m):
            expected = m.mechanism.fuse_input(norm(m.wte(tokens)), Feedback(memory))
            tol = 1e-8 if expected.dtype == torch.float64 else 1e-5
            _close(fn(m, tokens, memory), expected, "fused input u", hint, atol=tol)
    _passed("your GLU fusion matches FBT.fuse_input")


@_register
@exercise(solutions.jacobi_pass)
def check_jacobi_pass(fn: Callable[[GPT, torch.Tensor, torch.Tensor | None], torch.Tensor]) -> Callable:
    """``fn(model, idx, previous)``: the memory (B, T, D) one Jacobi pass produces from the previous
    pass's memory (None before pass 1: a plain pass).

    Three passes chained, compared with ``schedules.iterate_passes`` for FBT and LRT.
    """
    hint = ("Pass k reads pass k-1's memory shifted right by one (schedules.shift_right: position t reads "
            "m_{t-1}, position 0 zeros) and only positions t >= 1 read it (schedules.feedback_mask).")
    for mechanism in ("fbt", "lrt"):
        model = practice_model(mechanism)
        idx = _tokens()
        previous = None
        with torch.no_grad():
            for k, out in enumerate(schedules.iterate_passes(model, idx, passes=3), start=1):
                got = fn(model, idx, previous)
                _close(got, out.memory, f"{mechanism}, memory after pass {k}", hint)
                previous = out.memory
    _passed("your pass matches schedules.iterate_passes for three passes, FBT and LRT")


# ---------------------------------------------------------------------------------------------- 06
@_register
@exercise(solutions.one_step_jacobian)
def check_one_step_jacobian(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor]) -> Callable:
    """``fn(model, idx, t)``: (B, D, D) the Jacobian ``d m_t / d m_{t-1}`` of the exact recurrence at
    position ``t``, the keys/values of positions < t held at their exact values.

    Compared with ``analysis.dynamics.recurrence_jacobians`` on FBT and LRT practice models.
    """
    from ..analysis.dynamics import recurrence_jacobians

    hint = ("Run the exact recurrence over positions < t into a KV cache (schedules.sequential(..., cache=...)); "
            "differentiate one step of position t alone, reading memory m at that cache, at m = cache.state "
            "(the exact m_{t-1}); row i of the answer is d m_t[i] / d m_{t-1}.")
    t = T - 3
    for mechanism in ("fbt", "lrt"):
        model, idx = practice_model(mechanism), _tokens()
        expected = recurrence_jacobians(model, idx, [t])[:, 0]
        got = fn(model, idx, t)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if torch.allclose(got.transpose(-1, -2), expected, atol=1e-8) and not torch.allclose(got, expected):
                raise AssertionError(f"{mechanism}: you returned the transpose: row i must be d m_t[i] / d m_{{t-1}}, "
                                     "the output's i-th entry against every input entry")
            zero = _jacobian_at_zero(model, idx, t)
            if torch.allclose(got, zero, atol=1e-8) and not torch.allclose(zero, expected, atol=1e-8):
                raise AssertionError(f"{mechanism}: this is the Jacobian at memory 0, not at the exact m_{{t-1}} the "
                                     "recurrence carries there: differentiate at cache.state. " + hint)
        _close(got, expected, f"{mechanism}, the one-step Jacobian at t = {t}", hint)
    _passed("your Jacobian matches analysis.dynamics.recurrence_jacobians, FBT and LRT")


def _jacobian_at_zero(model: GPT, idx: torch.Tensor, t: int) -> torch.Tensor:
    """The one-step Jacobian taken at memory 0 (the slip of differentiating at the wrong point)."""
    B = idx.size(0)
    cache = model.new_kv_cache(B, t + 1)
    with torch.no_grad():
        schedules.sequential(model, idx[:, :t], cache=cache)

    def step(memory: torch.Tensor) -> torch.Tensor:
        return model.step(idx[:, t:t + 1], memory=memory[:, None], positions=torch.tensor([t]),
                          kv=copy.deepcopy(cache)).memory[:, 0]

    full = torch.autograd.functional.jacobian(step, torch.zeros_like(cache.state))
    return torch.stack([full[b, :, b] for b in range(B)])


# ---------------------------------------------------------------------------------------------- 05
def _probe_data(seed: int, case: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and groups for one of three cases.

    ``readable``: the label is linearly readable. ``leaky``: every group shares one label and one
    feature code, and the codes say nothing about labels across groups — a probe tested on groups it
    was trained on scores high, on unseen groups near chance. ``scale``: readable from feature 0, but
    one large group (GroupKFold's first fold holds it) has that feature 1000x larger — a scaler fitted
    on all rows takes its scale from that held-out group, shrinks the feature in the training rows
    below what an L2 probe with C=0.1 can use, and the fold drops to chance."""
    rng = np.random.default_rng(seed)
    if case == "scale":
        groups = np.repeat(np.arange(24), [40] + [10] * 23)
        features = rng.normal(size=(len(groups), 16))
        labels = (features[:, 0] > 0).astype(int)
        features[groups == 0, 0] *= 1000.0
    elif case == "leaky":
        groups = np.repeat(np.arange(24), 10)
        labels = rng.integers(0, 2, 24)[groups]
        codes = rng.normal(size=(24, 16))
        features = codes[groups] + 0.3 * rng.normal(size=(len(groups), 16))
    else:
        groups = np.repeat(np.arange(24), 10)
        features = rng.normal(size=(len(groups), 16))
        labels = (features[:, 0] + 0.5 * rng.normal(size=len(groups)) > 0).astype(int)
    return features, labels, groups


PROBE_CASES = {  # what each case catches, as the failure message says it
    "readable": ("linearly readable labels", ""),
    "leaky": ("data where only unseen groups keep it honest",
              "A probe that beats chance here saw its test groups in training: split with GroupKFold. "),
    "scale": ("data where one held-out group's feature 0 is 1000x larger",
              "Fit the StandardScaler on the fold's training rows only: fitted on all rows it takes the "
              "held-out group's scale, and the probe cannot use feature 0 any more. "),
}


@_register
@exercise(solutions.grouped_cv_probe)
def check_grouped_cv_probe(fn: Callable[[np.ndarray, np.ndarray, np.ndarray, int], float]) -> Callable:
    """``fn(features, labels, groups, folds)``: the mean held-out accuracy of an L2 logistic probe
    (``C=0.1``) under ``folds``-fold grouped cross-validation, features standardised per fold on the
    training rows only.

    Compared with ``fit_probe``'s accuracy, on data where the label is readable, on data where only
    a probe that sees test groups in training can score (grouping is what keeps it at chance), and on
    data where a scaler fitted on all rows (test rows included) loses the label.
    """
    hint = ("Split with sklearn.model_selection.GroupKFold(n_splits=folds).split(X, y, groups) so that no "
            "group is in both train and test; fit StandardScaler on the training rows; "
            "LogisticRegression(C=0.1); average the folds' accuracies.")
    for case, (what, slip) in PROBE_CASES.items():
        features, labels, groups = _probe_data(seed=0, case=case)
        expected = fit_probe(features, labels, groups, folds=4)["accuracy"]
        got = fn(features, labels, groups, 4)
        if not isinstance(got, (float, np.floating)):
            raise AssertionError(f"fn must return the mean accuracy as a float, got {type(got).__name__}. {hint}")
        if not abs(float(got) - expected) <= 0.03:
            raise AssertionError(f"on {what}: accuracy {float(got):.3f}, expected {expected:.3f} (within 0.03). "
                                 f"{slip}{hint}")
    _passed("your grouped-CV probe matches fit_probe (readable labels, group leakage kept out, "
            "the scaler fitted per fold)")


# ---------------------------------------------------------------------------------------------- 07
def _trace_cases(task: Task) -> list[tuple[list[int], int]]:
    """Continuations of the task's prompts: every step written, steps skipped, answer only, cut off."""
    cases = []
    for verbosity in ("full", "skip", "answer"):
        variant = get_task("arith_cot", steps=task.steps, max_value=task.max_value, verbosity=verbosity)
        batch = variant.sample(4, seed=3)
        for text, prompt, answer in zip(batch.texts, batch.prompts, batch.labels.tolist()):
            cases.append((task.tokenizer.encode(text[len(prompt):]), int(answer)))
    cut, answer = cases[0]
    cases.append((cut[: len(cut) // 2], answer))  # no marker yet: every generated token counts
    at = next(i for i in range(len(cut)) if task.tokenizer.decode(cut[i:i + 4]) == ANSWER_MARKER)
    cases.append((cut[: at + 2], answer))  # cut off inside the marker ("##"): no marker, every token counts
    return cases


@_register
@exercise(solutions.trace_length)
def check_trace_length(fn: Callable[[Task, list[int]], int], task: Task | None = None) -> Callable:
    """``fn(task, generated)``: how many of the generated token ids come before the answer marker
    (``"####"``), or all of them when there is none.

    Compared with what ``trace_lengths`` records, on continuations of every verbosity, one cut off
    before its answer and one cut off inside the marker (``"##"``: no marker, so a search for a
    single ``'#'`` miscounts it).
    """
    task = get_task("arith_cot") if task is None else task
    hint = ("Find the first occurrence of the whole marker, the sub-list task.tokenizer.encode('####') (four "
            "ids, not one '#'), in the generated ids and count the ids before it; without a marker, count them "
            "all (a continuation cut off after '##' has none). An answer-only trace has length 0.")
    for generated, answer in _trace_cases(task):
        expected = read_trace(task, generated, answer)["length"]
        got = fn(task, list(generated))
        if got != expected:
            text = task.tokenizer.decode(generated)
            raise AssertionError(f"for the continuation {text!r}: length {got!r}, expected {expected}. {hint}")
    _passed("your trace length matches trace_lengths on every verbosity and a cut-off trace")


@_register
@exercise(solutions.swap_patch)
def check_swap_patch(fn: Callable[[GPT, torch.Tensor, int, int, int], torch.Tensor], model: GPT | None = None,
                     tokens: torch.Tensor | None = None, position: int | None = None) -> Callable:
    """``fn(model, tokens, i, j, p)``: the logits (V,) at position ``p`` of example ``i`` when the memory it
    reads there is the one example ``j`` produced at ``p - 1`` (positions before ``p`` plain: the probe's
    ``suffix1``).

    Compared with ``analysis.interventions.intervene`` (a patch of rows) on a random FBT model, where
    taking i's own memory, the memory of position p, or a step at position 0 all change the logits;
    and on ``model`` with its ``tokens`` (at least 3 rows) and label ``position`` when given.
    """
    hint = ("j's memory is the last position of j's plain run over tokens[j, :p] (m_{p-1}); i's own prefix "
            "tokens[i, :p] fills the KV cache; the step of token p is told positions=torch.tensor([p]).")
    cases = [(practice_model("fbt"), _tokens(), 6)] + ([] if model is None else [(model, tokens, position)])
    for m, toks, p in cases:
        for i, j in ((0, 1), (1, 0), (2, 0)):
            rows = torch.arange(len(toks))
            rows[i] = j
            expected = intervene(m, toks[:, : p + 1], Intervention("patch", rows=rows), p, regime="soft",
                                 prompt_len=p)[i, p]
            tol = 1e-8 if expected.dtype == torch.float64 else 1e-5
            _close(fn(m, toks, i, j, p), expected, f"the logits of example {i} reading example {j}'s memory",
                   hint, atol=tol)
    _passed("your swap patch matches analysis.interventions on a random FBT model"
            + ("" if model is None else " and on the specimen"))


# ---------------------------------------------------------------------------------------------- 00
@_register
@exercise(solutions.relative_distance)
def check_relative_distance(fn: Callable[[torch.Tensor, torch.Tensor], float], model: GPT | None = None,
                            idx: torch.Tensor | None = None) -> Callable:
    """``fn(logits, exact)``: ``||logits - exact|| / ||exact||`` over every entry, a float.

    Compared on logits whose norm differs from the exact ones' (so dividing by the wrong norm shows)
    and whose error sits at a few entries (so a largest or mean absolute difference shows), then with
    the ``distance`` column of ``compare_schedules`` for two schedules of a random LRT model (and of
    ``model`` on ``idx`` when given).
    """
    hint = ("The relative distance is one number for the whole tensor: the Frobenius norm of the difference, "
            "(logits - exact).norm(), divided by the norm of the exact logits, exact.norm() (not of logits).")
    gen = torch.Generator().manual_seed(4)
    exact = torch.randn(2, T, VOCAB, generator=gen, dtype=torch.float64)
    off = exact.clone()
    off[0, 0, 1], off[1, 3, 2], off[1, 8, 3] = 5.0, 5.0, 5.0
    cases = [("logits twice the exact ones", 2 * exact, 1.0), ("logits off at three entries", off, None)]
    for what, logits, want in cases:
        expected = float((logits - exact).norm() / exact.norm()) if want is None else want
        got = fn(logits, exact)
        if not isinstance(got, (float, np.floating)) and not (isinstance(got, torch.Tensor) and got.numel() == 1):
            raise AssertionError(f"{what}: fn must return one number (a float), got {type(got).__name__}. {hint}")
        if not abs(float(got) - expected) <= 1e-9 * max(1.0, expected):
            raise AssertionError(f"{what}: distance {float(got):.6g}, expected {expected:.6g}. {hint}")
    runs = [(practice_model("lrt"), _tokens())] + ([] if model is None else [(model, idx)])
    for m, toks in runs:
        with torch.no_grad(), eval_mode(m):
            reference = schedules.sequential(m, toks).logits
            settings = [{"schedule": "multipass", "passes": 2}, {"schedule": "interleaved", "subsets": 2}]
            table = compare_schedules(m, toks, settings, reference=reference)
            for setting, row in zip(settings, table.itertuples()):
                got = float(fn(schedules.run(m, toks, **setting).logits, reference))
                if not abs(got - row.distance) <= 1e-6 * max(1.0, row.distance):
                    raise AssertionError(f"{row.label}: distance {got:.6g}, compare_schedules says "
                                         f"{row.distance:.6g}. {hint}")
    _passed("your relative distance matches compare_schedules"
            + ("" if model is None else " (on a random LRT and on this model)"))


# ---------------------------------------------------------------------------------------------- 08
VERDICT_CASES = [  # (interval, expected_sign): both sides of zero, both signs, straddling, too few seeds
    ({"low": 0.1, "high": 0.3, "seeds": 3}, 1), ({"low": 0.1, "high": 0.3, "seeds": 3}, -1),
    ({"low": -0.3, "high": -0.1, "seeds": 3}, -1), ({"low": -0.3, "high": -0.1, "seeds": 5}, 1),
    ({"low": -0.1, "high": 0.3, "seeds": 3}, 1), ({"low": -0.3, "high": 0.01, "seeds": 3}, -1),
    ({"low": 0.1, "high": 0.3, "seeds": 2}, 1), ({"low": -0.3, "high": -0.1, "seeds": 1}, -1),
]


@_register
@exercise(solutions.read_verdict)
def check_verdict(fn: Callable[[dict[str, float], int], str]) -> Callable:
    """``fn(interval, expected_sign)``: a recipe's verdict from its interval (``low``, ``high``, ``seeds``)
    and the side of zero the paper claims (``expected_sign``: +1 higher, -1 lower), as
    ``wb.evaluation.verdict`` reads it: ``reproduces``, ``does not reproduce``, ``inconclusive``, or
    ``not tested: ...`` with fewer than 3 seeds per arm.

    Compared with ``wb.evaluation.verdict`` on intervals on both sides of zero, for both signs, one
    that straddles zero, and two from too few seeds.
    """
    hint = ("First the seeds: fewer than 3 per arm is 'not tested: ...' whatever the interval. Then the side: an "
            "interval wholly above 0 (low > 0) or wholly below (high < 0) reproduces only when that side is the "
            "paper's (expected_sign); the other side does not reproduce; an interval holding 0 is inconclusive.")
    for interval, sign in VERDICT_CASES:
        expected = verdict(interval, sign)
        got = fn(dict(interval), sign)
        agrees = got == expected or (expected.startswith("not tested") and str(got).startswith("not tested"))
        if not agrees:
            raise AssertionError(f"interval [{interval['low']:+.2f}, {interval['high']:+.2f}] from "
                                 f"{interval['seeds']} seeds, expected_sign={sign:+d}: got {got!r}, expected "
                                 f"{expected!r}. {hint}")
    _passed("your verdicts match wb.evaluation.verdict on every side of zero, both signs and too few seeds")


# ---------------------------------------------------------------------------------------------- 09
def _tiny_feedback_gpt2() -> Any:
    """A float64 2-layer GPT-2 wrapped by ``FeedbackLM``, built offline from a config (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from ..hf import FeedbackLM

    config = GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    return FeedbackLM(GPT2LMHeadModel(config).to(torch.float64)).eval()


@_register
@exercise(solutions.hf_fused_input)
def check_hf_fusion(fn: Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor], model: Any = None) -> Callable:
    """``fn(model, input_ids, memory)``: the input (B, T, E) a ``FeedbackLM`` with GLU fusion feeds its HF
    stack in place of the embedding ``e``, where ``memory[:, t]`` is ``m_{t-1}``:
    ``RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))) * rms(e)``.

    Compared with the wrapper's own ``mechanism.fusion`` (every position reads memory) on a tiny
    float64 GPT-2, whose embeddings sit far from unit scale, and on ``model`` when given.
    """
    hint = ("Take e from the HF model's own embedding (model.hf.get_input_embeddings()); fuse as FBT does, "
            "norm((W_U m) * sigmoid(W_G norm(e))) with model.mechanism.fusion's W_U and W_G; then multiply by "
            "rms(e) = e.pow(2).mean(-1, keepdim=True).sqrt(), so the fused input has the scale of the embedding "
            "it replaces (an HF stack expects its raw scale, not unit RMS).")
    models = [_tiny_feedback_gpt2()] + ([] if model is None else [model])
    for m in models:
        width = m.config.n_embd
        ids = _tokens() % m.config.vocab_size
        dtype = m.hf.get_input_embeddings().weight.dtype
        memory = norm(torch.randn(ids.size(0), ids.size(1), width, generator=torch.Generator().manual_seed(5),
                                  dtype=dtype))
        with torch.no_grad():
            expected = m.mechanism.fusion(m.hf.get_input_embeddings()(ids), memory, None)
            got = fn(m, ids, memory)
        tol = 1e-8 if dtype == torch.float64 else 1e-5
        _close(got, expected.to(dtype), "fused input", hint, atol=tol * max(1.0, float(expected.abs().max())))
    _passed("your fusion matches the wrapper's GLU fusion"
            + ("" if model is None else " (a tiny GPT-2 and this model)"))
