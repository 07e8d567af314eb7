"""Exercise checks: a notebook calls one right after the learner's code, and it says what is wrong.

ARENA's pattern (objectives, an exercise, a test right after it, a solution opened only when
wanted), with the package doing the testing: every ``check_*`` takes the learner's function, runs
it on small inputs where a mistake shows (float64 models with every weight off its zero init,
data built so that the usual slip changes the answer) and compares it with what the package
computes. A wrong answer raises ``AssertionError`` with a message that says where it differs and
what to look at; a right one prints a line and returns None. A check never fixes or hides an
error the learner's function raises.

Checks, by notebook:

- 01: ``check_kv_cache_step(fn)`` — logits from a prefill plus one-token steps through a KV cache;
- 02: ``check_lrt_kv_injection(fn)`` — LRT's gated recurrent keys/values for one block;
- 03: ``check_gauss_seidel_sweep(fn)`` — one interleaved sweep with write-back (``schedules.interleaved``);
- 04: ``check_glu_fusion(fn)`` — FBT's fused input by hand (``FBT.fuse_input``);
- 04/06: ``check_jacobi_pass(fn)`` — one pass of the pass map (``schedules.iterate_passes``);
- 05: ``check_grouped_cv_probe(fn)`` — a grouped cross-validated probe (``analysis.probes.fit_probe``);
- 07: ``check_trace_length(fn)`` — a continuation's trace length (``analysis.traces.trace_lengths``);
- 05b: ``check_swap_patch(fn)`` — one example reading a group mate's memory (``analysis.interventions``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from . import schedules
from .analysis.interventions import Intervention, intervene
from .analysis.probes import fit_probe, random_init_model
from .analysis.traces import _read_trace
from .config import ModelConfig
from .mechanisms import Feedback, norm
from .model import GPT, build_model, eval_mode
from .tasks import Task
from .tasks import get as get_task

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


# ---------------------------------------------------------------------------------------------- 01
def check_kv_cache_step(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor], model: GPT | None = None) -> None:
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
def check_lrt_kv_injection(fn: Callable[[GPT, int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                                        tuple[torch.Tensor, torch.Tensor]]) -> None:
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
def check_gauss_seidel_sweep(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor]) -> None:
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
def check_glu_fusion(fn: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor], model: GPT | None = None) -> None:
    """``fn(model, tokens, memory)``: FBT's fused input u (B, T, D) from the token ids and ``m_{t-1}``.

    Compared with ``FBT.fuse_input`` (every position reads memory here) on a random FBT model, and
    on ``model`` when given.
    """
    hint = ("u = RMSNorm((W_U m) * sigmoid(W_G RMSNorm(e))): the state on the value path (W_U), the token "
            "embedding, normed, through the gate (W_G); RMSNorm is wb.mechanisms.norm.")
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


def check_jacobi_pass(fn: Callable[[GPT, torch.Tensor, torch.Tensor | None], torch.Tensor]) -> None:
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


# ---------------------------------------------------------------------------------------------- 05
def _probe_data(seed: int, leaky: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and groups. ``leaky``: every group shares one label and one feature code, and
    the codes say nothing about labels across groups — a probe tested on groups it was trained on
    scores high, on unseen groups near chance. Otherwise the label is linearly readable."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(24), 10)
    if leaky:
        labels = rng.integers(0, 2, 24)[groups]
        codes = rng.normal(size=(24, 16))
        features = codes[groups] + 0.3 * rng.normal(size=(len(groups), 16))
    else:
        features = rng.normal(size=(len(groups), 16))
        labels = (features[:, 0] + 0.5 * rng.normal(size=len(groups)) > 0).astype(int)
    return features, labels, groups


def check_grouped_cv_probe(fn: Callable[[np.ndarray, np.ndarray, np.ndarray, int], float]) -> None:
    """``fn(features, labels, groups, folds)``: the mean held-out accuracy of an L2 logistic probe
    (``C=0.1``) under ``folds``-fold grouped cross-validation, features standardised per fold on the
    training rows only.

    Compared with ``fit_probe``'s accuracy, on data where the label is readable and on data where
    only a probe that sees test groups in training can score (grouping is what keeps it at chance).
    """
    hint = ("Split with sklearn.model_selection.GroupKFold(n_splits=folds).split(X, y, groups) so that no "
            "group is in both train and test; fit StandardScaler on the training rows; "
            "LogisticRegression(C=0.1); average the folds' accuracies.")
    for leaky in (False, True):
        features, labels, groups = _probe_data(seed=0, leaky=leaky)
        expected = fit_probe(features, labels, groups, folds=4)["accuracy"]
        got = fn(features, labels, groups, 4)
        if not isinstance(got, (float, np.floating)) or not abs(float(got) - expected) <= 0.03:
            what = "data where only unseen groups keep it honest" if leaky else "linearly readable labels"
            raise AssertionError(f"on {what}: accuracy {got!r}, expected {expected:.3f} (within 0.03). {hint}")
    _passed("your grouped-CV probe matches fit_probe (readable labels, and group leakage kept out)")


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
    return cases


def check_trace_length(fn: Callable[[Task, list[int]], int], task: Task | None = None) -> None:
    """``fn(task, generated)``: how many of the generated token ids come before the answer marker
    (``"####"``), or all of them when there is none.

    Compared with what ``trace_lengths`` records, on continuations of every verbosity and one cut
    off before its answer.
    """
    task = get_task("arith_cot") if task is None else task
    hint = ("Find the first occurrence of task.tokenizer.encode('####') in the generated ids and count the "
            "ids before it; without a marker, count them all. An answer-only trace has length 0.")
    for generated, answer in _trace_cases(task):
        expected = _read_trace(task, generated, answer)["length"]
        got = fn(task, list(generated))
        if got != expected:
            text = task.tokenizer.decode(generated)
            raise AssertionError(f"for the continuation {text!r}: length {got!r}, expected {expected}. {hint}")
    _passed("your trace length matches trace_lengths on every verbosity and a cut-off trace")


def check_swap_patch(fn: Callable[[GPT, torch.Tensor, int, int, int], torch.Tensor], model: GPT | None = None,
                     tokens: torch.Tensor | None = None, position: int | None = None) -> None:
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
