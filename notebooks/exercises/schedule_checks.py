"""Exercise checks on the schedules (00, 03, 04, 06)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from workbench import schedules
from workbench.analysis.fixed_point import pass_dynamics
from workbench.analysis.schedule_agreement import compare_schedules
from workbench.model import GPT, eval_mode

from . import solutions
from .framework import VOCAB, T, as_number, close, exercise, passed, practice_model, practice_tokens, register


@register
@exercise(solutions.relative_distance)
def check_relative_distance(fn: Callable[[torch.Tensor, torch.Tensor], float], model: GPT | None = None,
                            idx: torch.Tensor | None = None) -> Callable:
    """``fn(logits, exact)``: ``||logits - exact|| / ||exact||`` over every entry, a float."""
    hint = ("The relative distance is one number for the whole tensor: the Frobenius norm of the difference, "
            "(logits - exact).norm(), divided by the norm of the exact logits, exact.norm() (not of logits).")
    gen = torch.Generator().manual_seed(4)
    exact = torch.randn(2, T, VOCAB, generator=gen, dtype=torch.float64)
    off = exact.clone()
    off[0, 0, 1], off[1, 3, 2], off[1, 8, 3] = 5.0, 5.0, 5.0
    cases = [("logits twice the exact ones", 2 * exact, 1.0), ("logits off at three entries", off, None)]
    for what, logits, want in cases:
        expected = float((logits - exact).norm() / exact.norm()) if want is None else want
        got = as_number(fn(logits, exact), what, hint)
        if not abs(got - expected) <= 1e-9 * max(1.0, expected):
            raise AssertionError(f"{what}: distance {got:.6g}, expected {expected:.6g}. {hint}")
    runs = [(practice_model("lrt"), practice_tokens())] + ([] if model is None else [(model, idx)])
    for m, toks in runs:
        with torch.no_grad(), eval_mode(m):
            reference = schedules.Sequential().run(m, toks).logits
            settings = [{"schedule": "multipass", "passes": 2}, {"schedule": "interleaved", "subsets": 2}]
            table = compare_schedules(m, toks, settings, reference=reference)
            for setting, row in zip(settings, table.itertuples()):
                got = float(fn(schedules.parse(setting).run(m, toks).logits, reference))
                if not abs(got - row.distance) <= 1e-6 * max(1.0, row.distance):
                    raise AssertionError(f"{row.label}: distance {got:.6g}, compare_schedules says "
                                         f"{row.distance:.6g}. {hint}")
    passed("your relative distance matches compare_schedules"
           + ("" if model is None else " (on a random LRT and on this model)"))


@register
@exercise(solutions.sweep)
def check_gauss_seidel_sweep(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor]) -> Callable:
    """``fn(model, idx, subsets)``: logits (B, T, V) of one interleaved sweep with write-back.

    An init pass fills a ``KVBuffer``; subset s (positions ``t % S == s``) is then recomputed reading ``m_{t-1}`` from
    the latest estimate (subset s-1's write-back, or the init pass for subset 0), and its K/V and memory written back.
    """
    hint = ("Subset s must read the memory that subset s-1 wrote back in this sweep (subset 0: the init "
            "pass, shifted by one; position 0 reads none), and the refined keys/values must go back into the "
            "buffer (model.step(..., positions=buffer.refine(s), kv=buffer)).")
    for mechanism in ("lrt", "fbt"):
        model = practice_model(mechanism)
        idx = practice_tokens()
        for subsets in (1, 2, 3, T):
            with torch.no_grad():
                expected = schedules.Interleaved(subsets).run(model, idx).logits
                close(fn(model, idx, subsets), expected, f"{mechanism}, subsets={subsets}", hint)
    passed("your sweep matches schedules.Interleaved for LRT and FBT, S = 1, 2, 3 and T")


@register
@exercise(solutions.mean_passes)
def check_mean_passes(fn: Callable[[dict[int, float]], float]) -> Callable:
    """``fn(mix)``: the expected pass count of a pass mix ``{passes: probability}``, what one training step costs."""
    hint = ("Each batch draws its pass count k with probability p_k, so a step costs k passes only that often: "
            "the expected count weighs every k by its p_k.")
    mixes = [{1: 0.75, 2: 0.22, 3: 0.03}, {1: 0.75, 2: 0.25}, {1: 0.1, 4: 0.9}, {2: 1.0}]
    for mix in mixes:
        what = f"mix {mix}"
        expected = schedules.PassMix.of(mix).pass_equivalents()
        got = as_number(fn(dict(mix)), what, hint)
        if abs(got - expected) <= 1e-9:
            continue
        if abs(got - sum(mix) / len(mix)) <= 1e-9:
            raise AssertionError(f"{what}: {got:.4g} passes, expected {expected:.4g}: that is the plain mean of the "
                                 "pass counts, as if each were drawn equally often; weigh each by its probability.")
        if abs(got - max(mix)) <= 1e-9:
            raise AssertionError(f"{what}: {got:.4g} passes, expected {expected:.4g}: that is the deepest pass count, "
                                 "what only the batches that draw it cost. " + hint)
        raise AssertionError(f"{what}: {got:.4g} passes, expected {expected:.4g}. {hint}")
    passed("your expected pass counts match PassMix.pass_equivalents on four mixes")


@register
@exercise(solutions.token_flops)
def check_token_flops(fn: Callable[[GPT, int], float]) -> Callable:
    """``fn(model, seq_len)``: the training FLOPs (forward + backward) one token costs in one plain pass, the account
    every ``Schedule.flops`` multiplies by pass equivalents and tokens."""
    hint = ("6 FLOPs per weight a token multiplies (2 forward: a multiply and an add; 4 backward): every block's, "
            "the mechanism's and the readout's (the embedding matrix when tied), not the lookup E[token]; plus "
            "12 L D seq_len for attention scores and values over seq_len keys.")
    for mechanism in ("none", "fbt", "lrt"):
        model = practice_model(mechanism)
        groups, c = model.num_params_by_group(), model.config
        for seq_len in (T, 4 * T):
            what = f"{mechanism}{' (tied)' if c.tie_embeddings else ''}, seq_len={seq_len}"
            expected = model.flops_per_token(seq_len)
            got = as_number(fn(model, seq_len), what, hint)
            if abs(got - expected) <= 1e-9 * expected:
                continue
            attention = 12.0 * c.n_layer * c.n_embd
            slips = [(expected / 3, "the forward alone (2 per weight): the backward costs twice the forward, "
                      "so training costs 6 per weight"),
                     (expected - attention * seq_len, "no attention term: scores and values over seq_len keys add "
                      "12 L D seq_len"),
                     (expected + attention * (c.seq_len - seq_len), "attention over config.seq_len keys: the "
                      "account is for the context asked for, seq_len")]
            if groups["readout"]:
                slips.append((expected + 6 * groups["embedding"], "the embedding lookup E[token] reads one row "
                              "and multiplies nothing: leave the (untied) embedding out"))
            else:
                slips.append((expected - 6 * groups["embedding"], "tied: the embedding matrix is also the readout "
                              "(groups['readout'] is 0), and every token multiplies it"))
            if groups["mechanism"]:
                slips.append((expected - 6 * groups["mechanism"], "the mechanism's weights are left out: a token "
                              "multiplies them too"))
            for value, why in slips:
                if value != expected and abs(got - value) <= 1e-9 * expected:
                    raise AssertionError(f"{what}: {got:,.0f} FLOPs a token, expected {expected:,.0f}: {why}.")
            raise AssertionError(f"{what}: {got:,.0f} FLOPs a token, expected {expected:,.0f}. {hint}")
    passed("your FLOPs per token match GPT.flops_per_token (untied, tied, LRT; two context lengths)")


@register
@exercise(solutions.jacobi_pass)
def check_jacobi_pass(fn: Callable[[GPT, torch.Tensor, torch.Tensor | None], torch.Tensor]) -> Callable:
    """``fn(model, idx, previous)``: the memory (B, T, D) one Jacobi pass produces from the previous pass's memory (None
    before pass 1: a plain pass)."""
    hint = ("Pass k reads pass k-1's memory shifted right by one (schedules.shift_right: position t reads "
            "m_{t-1}, position 0 zeros) and only positions t >= 1 read it (schedules.feedback_mask).")
    for mechanism in ("fbt", "lrt"):
        model = practice_model(mechanism)
        idx = practice_tokens()
        previous = None
        with torch.no_grad():
            for k, out in enumerate(schedules.iterate_passes(model, idx, passes=3), start=1):
                got = fn(model, idx, previous)
                close(got, out.memory, f"{mechanism}, memory after pass {k}", hint)
                previous = out.memory
    passed("your pass matches schedules.iterate_passes for three passes, FBT and LRT")


@register
@exercise(solutions.soft_logits)
def check_soft_logits(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor]) -> Callable:
    """``fn(model, idx, prompt_len)``: the logits (B, T, V) SOFT decoding computes, the exact recurrence after a plain
    prompt: ``Sequential().run(model, idx, plain_prefix=prompt_len)``."""
    hint = ("The prompt is one plain forward into the cache (model.step(idx[:, :P], kv=cache)); then position t "
            "(t >= P) is one step at positions=torch.tensor([t]) against that same cache, reading the memory the "
            "step before produced (position P: the prompt's last memory).")
    for mechanism in ("fbt", "lrt"):
        model, idx = practice_model(mechanism), practice_tokens()
        for prompt_len in (4, 1):
            what = f"{mechanism}, prompt_len={prompt_len}"
            with torch.no_grad():
                expected = schedules.Sequential().run(model, idx, prompt_len).logits
                got = fn(model, idx, prompt_len)
                if isinstance(got, torch.Tensor) and got.shape == expected.shape:
                    off = ((got.detach().to(expected.dtype) - expected).abs() > 1e-8).any(-1).any(0)
                    first = int(off.nonzero()[0]) if off.any() else None
                    if first is not None and first < prompt_len:
                        raise AssertionError(f"{what}: the prompt differs from position {first} on: under SOFT the "
                                             "prompt is one plain pass, its tokens reading no memory (plain_prefix"
                                             f"={prompt_len}); only the tokens after it recur.")
                    plain_first = schedules.Sequential().run(model, idx, prompt_len + 1).logits  # P itself plain
                    if first == prompt_len and torch.allclose(got.detach().to(expected.dtype), plain_first, atol=1e-8):
                        raise AssertionError(f"{what}: the first token after the prompt read no memory: position "
                                             f"{prompt_len} reads m_{{{prompt_len - 1}}}, the memory of the prompt's "
                                             "last token (out.memory[:, -1:] of the prompt's pass).")
                    if first == prompt_len:
                        raise AssertionError(f"{what}: position {prompt_len}, the first token after the prompt, "
                                             "differs: a one-token step must be told "
                                             "where it is (positions=torch.tensor([t])) and attend to the cache the "
                                             "prompt filled, the same cache at every step.")
                    if first == prompt_len + 1:
                        raise AssertionError(f"{what}: position {prompt_len} is right and position {first} is not: "
                                             "each step must read the memory the step before produced (its "
                                             "out.memory), not the prompt's again.")
            close(got, expected, what, hint)
    passed("your SOFT logits match schedules.Sequential with plain_prefix=prompt_len, FBT and LRT")


@register
@exercise(solutions.residual)
def check_residual(fn: Callable[[torch.Tensor, torch.Tensor], float]) -> Callable:
    """``fn(prev, new)``: the relative residual ``||new - prev|| / ||new||`` between consecutive Jacobi passes, a float
    (``schedules.FixedPoint`` stops on it)."""
    hint = ("delta_k = ||H^k - H^(k-1)|| / ||H^k||: the norm of the change over every entry, divided by the norm "
            "of the new pass, new.norm() (not of prev).")
    prev = torch.randn(2, T, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    cases = [("a pass twice the previous one", prev, 2 * prev, 0.5)]
    for mechanism in ("fbt", "lrt"):
        model, idx = practice_model(mechanism), practice_tokens()
        deltas = pass_dynamics(model, idx, passes=4)["delta"].tolist()
        with torch.no_grad():
            memories = [out.memory for out in schedules.iterate_passes(model, idx, passes=4)]
        cases += [(f"{mechanism}, passes {k - 1} and {k} (pass_dynamics' delta)", memories[k - 2], memories[k - 1],
                   deltas[k - 1]) for k in (2, 3, 4)]
    for what, old, new, expected in cases:
        got = as_number(fn(old, new), what, hint)
        if abs(got - expected) <= 1e-9 * max(1.0, expected):
            continue
        change = float((new - old).norm())
        if abs(got - change / float(old.norm())) <= 1e-9 * max(1.0, got):
            raise AssertionError(f"{what}: residual {got:.6g}, expected {expected:.6g}: you divided by the previous "
                                 "pass's norm; FixedPoint divides by the new pass's, new.norm().")
        if abs(got - change) <= 1e-9 * max(1.0, got):
            raise AssertionError(f"{what}: residual {got:.6g}, expected {expected:.6g}: that is the absolute change "
                                 "||new - prev||; divide it by ||new|| so that it does not grow with the memory's "
                                 "scale.")
        raise AssertionError(f"{what}: residual {got:.6g}, expected {expected:.6g}. {hint}")
    passed("your residual matches pass_dynamics' delta, FBT and LRT")


@register
@exercise(solutions.one_step_jacobian)
def check_one_step_jacobian(fn: Callable[[GPT, torch.Tensor, int], torch.Tensor]) -> Callable:
    """``fn(model, idx, t)``: (B, D, D) the Jacobian ``d m_t / d m_{t-1}`` of the exact recurrence at position ``t``,
    the keys/values of positions < t held at their exact values."""
    from workbench.analysis.jacobians import recurrence_jacobians

    hint = ("Run the exact recurrence over positions < t into a KV cache (schedules.Sequential().prefill(..., cache)); "
            "differentiate one step of position t alone, reading memory m at that cache, at m = cache.state "
            "(the exact m_{t-1}); row i of the answer is d m_t[i] / d m_{t-1}.")
    t = T - 3
    for mechanism in ("fbt", "lrt"):
        model, idx = practice_model(mechanism), practice_tokens()
        expected = recurrence_jacobians(model, idx, [t])[:, 0]
        got = fn(model, idx, t)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if torch.allclose(got.transpose(-1, -2), expected, atol=1e-8) and not torch.allclose(got, expected):
                raise AssertionError(f"{mechanism}: you returned the transpose: row i must be d m_t[i] / d m_{{t-1}}, "
                                     "the output's i-th entry against every input entry")
            zero = jacobian_at_zero(model, idx, t)
            if torch.allclose(got, zero, atol=1e-8) and not torch.allclose(zero, expected, atol=1e-8):
                raise AssertionError(f"{mechanism}: this is the Jacobian at memory 0, not at the exact m_{{t-1}} the "
                                     "recurrence carries there: differentiate at cache.state. " + hint)
        close(got, expected, f"{mechanism}, the one-step Jacobian at t = {t}", hint)
    passed("your Jacobian matches analysis.jacobians.recurrence_jacobians, FBT and LRT")


def jacobian_at_zero(model: GPT, idx: torch.Tensor, t: int) -> torch.Tensor:
    """The one-step Jacobian taken at memory 0 (the slip of differentiating at the wrong point)."""
    B = idx.size(0)
    cache = model.new_kv_cache(B, t + 1)
    with torch.no_grad():
        schedules.Sequential().prefill(model, idx[:, :t], cache)

    def step(memory: torch.Tensor) -> torch.Tensor:
        return model.step(idx[:, t:t + 1], memory=memory[:, None], positions=torch.tensor([t]),
                          kv=copy.deepcopy(cache)).memory[:, 0]

    full = torch.autograd.functional.jacobian(step, torch.zeros_like(cache.state))
    return torch.stack([full[b, :, b] for b in range(B)])
