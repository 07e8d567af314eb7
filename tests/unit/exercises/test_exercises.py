"""Every exercise check passes its reference solution, tells the untouched stub "not done yet" (and hands
back the solution), and fails, with a helpful message, on each slip its hints warn about."""

from __future__ import annotations

import json

import numpy as np
import pytest

# slips of later exercises, one module per notebook group, beside this file (pytest's rootdir import)
import slips_01_03
import slips_04
import slips_05_07
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold, KFold
from sklearn.preprocessing import StandardScaler

import exercises as ex
import workbench as wb
from exercises import solutions as sol
from exercises.schedule_checks import jacobian_at_zero
from workbench.functional import norm
from workbench.kv_cache import KVBuffer, interleave
from workbench.schedules import feedback_mask, shift_right


def stub(*args):
    raise NotImplementedError("write this function")


# ---------------------------------------------------------------------------------------------- solution, stub
@pytest.mark.parametrize("name", sorted(ex.CHECKS))
def test_check_passes_its_solution_and_returns_it(name, capsys):
    check = ex.CHECKS[name]
    with torch.no_grad():
        assert check(check.solution) is check.solution
    assert capsys.readouterr().out.startswith("ok:")


@pytest.mark.parametrize("name", sorted(ex.CHECKS))
def test_the_stub_is_not_done_yet_and_gets_the_solution(name, capsys):
    """The untouched stub does not fail the notebook: the check says what to do and hands back the solution."""
    check = ex.CHECKS[name]
    assert check(stub) is check.solution
    out = capsys.readouterr().out
    assert out.startswith("not done yet: stub is still the stub (write this function)")
    assert "hints" in out and f"exercises.solutions.{check.solution.__name__}" in out


def test_a_not_implemented_error_from_deeper_down_is_not_the_stub():
    def calls_something_unfinished(task, generated):
        return stub()

    with pytest.raises(NotImplementedError):
        ex.check_trace_length(calls_something_unfinished)


# ---------------------------------------------------------------------------------------------- the slips
def kv_cache_logits(model, idx, prefill, *, pass_positions=True, one_cache=True):
    cache = model.new_kv_cache(idx.size(0), idx.size(1))
    pieces = [model.step(idx[:, :prefill], kv=cache).logits]
    for t in range(prefill, idx.size(1)):
        positions = torch.tensor([t]) if pass_positions else None
        if not one_cache:
            cache = model.new_kv_cache(idx.size(0), idx.size(1))
        pieces.append(model.step(idx[:, t:t + 1], positions=positions, kv=cache).logits)
    return torch.cat(pieces, dim=1)


def lrt_kv(model, layer, x, k, v, memory, *, swap_gates=False, shared=False, doubled=True):
    lrt = model.mechanism
    gates = (2 if doubled else 1) * torch.sigmoid(x[..., :lrt.gate_channels] @ lrt.gates[layer].weight.T)
    gates = gates.view(*x.shape[:2], 2, lrt.kv_heads, 1)
    g_local, g_feedback = gates.unbind(2)
    if swap_gates:
        g_local, g_feedback = g_feedback, g_local
    proj = 0 if len(lrt.rec_k) == 1 or shared else layer
    shape = (*memory.shape[:2], lrt.kv_heads, lrt.head_dim)
    k_rec = (memory @ lrt.rec_k[proj].weight.T).view(shape)
    v_rec = (memory @ lrt.rec_v[proj].weight.T).view(shape)
    return g_local * k + g_feedback * k_rec, g_local * v + g_feedback * v_rec


def gauss_seidel_sweep(model, idx, subsets, *, write_back=True, mask=True):
    B, T = idx.shape
    reads = feedback_mask(B, T)
    buffer = KVBuffer(model.config.n_layer, subsets)
    init = model.step(idx, kv=buffer)
    memory = init.memory.clone()
    logits = []
    for s in range(subsets):
        positions = buffer.refine(s)
        previous = shift_right(memory)[:, s::subsets]
        out = model.step(idx[:, s::subsets], memory=previous, memory_mask=reads[:, s::subsets] if mask else None,
                         positions=positions, kv=buffer)
        if write_back:
            memory[:, s::subsets] = out.memory
        logits.append(out.logits)
    return interleave(logits, 1, T)


def glu_fusion(model, tokens, memory, *, swap=False, inner_norm=True, outer_norm=True):
    fbt = model.mechanism
    e = norm(model.wte(tokens)) if inner_norm else model.wte(tokens)
    value, gate = (fbt.W_U(e), fbt.W_G(memory)) if swap else (fbt.W_U(memory), fbt.W_G(e))
    fused = value * torch.sigmoid(gate)
    return norm(fused) if outer_norm else fused


def jacobi_pass(model, idx, previous, *, shift=True, mask=True):
    if previous is None:
        return model.step(idx).memory
    memory = shift_right(previous) if shift else previous
    return model.step(idx, memory=memory, memory_mask=feedback_mask(*idx.shape) if mask else None).memory


def grouped_cv_probe(features, labels, groups, folds, *, grouped=True, scaler_on_all_rows=False):
    splitter = GroupKFold(n_splits=folds) if grouped else KFold(n_splits=folds, shuffle=True, random_state=0)
    scores = []
    for train, test in splitter.split(features, labels, groups if grouped else None):
        scaler = StandardScaler().fit(features if scaler_on_all_rows else features[train])
        probe = LogisticRegression(C=0.1).fit(scaler.transform(features[train]), labels[train])
        scores.append(probe.score(scaler.transform(features[test]), labels[test]))
    return float(np.mean(scores))


def trace_length(task, generated, *, count_all=False, marker_text=wb.tasks.ANSWER_MARKER):
    marker = task.tokenizer.encode(marker_text)
    if not count_all:
        for i in range(len(generated) - len(marker) + 1):
            if generated[i:i + len(marker)] == marker:
                return i
    return len(generated)


def swap_patch(model, tokens, i, j, p, *, memory_of_p=False, step_at=None, own=False, fill_cache=True):
    with torch.no_grad():
        source = model.step(tokens[(i if own else j):(i if own else j) + 1, :p + 1]).memory
        memory = source[:, p:p + 1] if memory_of_p else source[:, p - 1:p]
        cache = model.new_kv_cache(1, p + 1)
        if fill_cache:
            model.step(tokens[i:i + 1, :p], kv=cache)
        where = torch.tensor([p if step_at is None else step_at])
        return model.step(tokens[i:i + 1, p:p + 1], memory=memory, positions=where, kv=cache).logits[0, -1]


def relative_distance(logits, exact, *, by="exact"):
    diff = (logits - exact).double()
    if by == "logits":
        return float(diff.norm() / logits.double().norm())
    if by == "max_abs":
        return float(diff.abs().max() / exact.double().abs().max())
    if by == "mean":
        return float(diff.abs().mean() / exact.double().abs().mean())
    return float(diff.norm() / exact.double().norm())


def read_verdict(interval, expected_sign, *, use_sign=True, use_seeds=True, use_interval=True):
    if use_seeds and interval["seeds"] < 3:
        return "not tested: too few seeds"
    mean = (interval["low"] + interval["high"]) / 2
    if not use_interval:
        return "reproduces" if np.sign(mean) == expected_sign else "does not reproduce"
    if interval["low"] > 0 or interval["high"] < 0:
        side = 1 if interval["low"] > 0 else -1
        return "reproduces" if side == expected_sign or not use_sign else "does not reproduce"
    return "inconclusive"


def hf_fused_input(model, input_ids, memory, *, rescale=True, gate_norm=True):
    fusion = model.mechanism.fusion
    e = model.hf.get_input_embeddings()(input_ids)
    out = norm(fusion.W_U(memory) * torch.sigmoid(fusion.W_G(norm(e) if gate_norm else e)))
    return out * e.pow(2).mean(dim=-1, keepdim=True).sqrt() if rescale else out


def one_step_jacobian(model, idx, t, *, transpose=False, at_zero=False, plain=False):
    jac = jacobian_at_zero(model, idx, t) if at_zero else ex.solutions.one_step_jacobian(model, idx, t)
    if plain:  # a step of position t alone with no prefix: the keys/values of positions < t ignored
        def step(m):
            return model.step(idx[:, t:t + 1], memory=m[:, None], positions=torch.tensor([t])).memory[:, 0]
        cache = model.new_kv_cache(idx.size(0), t)
        with torch.no_grad():
            wb.schedules.Sequential().prefill(model, idx[:, :t], cache)
        full = torch.autograd.functional.jacobian(step, cache.state)
        jac = torch.stack([full[b, :, b] for b in range(idx.size(0))])
    return jac.transpose(-1, -2) if transpose else jac


def mean_passes(mix, *, weighted=True, deepest=False):
    if deepest:
        return float(max(mix))
    return float(sum(k * p for k, p in mix.items())) if weighted else float(np.mean(list(mix)))


def residual(prev, new, *, by="new"):
    change = (new - prev).double().norm()
    if by == "none":
        return float(change)
    return float(change / (new if by == "new" else prev).double().norm())


def lyapunov_2x2(A, steps, *, renormalise=True, log=True):
    v = torch.tensor([1.0, 0.0], dtype=torch.float64)
    total = 0.0
    for _ in range(steps):
        new = A.double() @ v
        growth = new.norm() / v.norm()
        total += float(torch.log(growth) if log else growth)
        v = new / new.norm() if renormalise else new
    return total / steps


# (check, wrong function, a phrase of the message that must name the slip), one row per slip a hint warns about
SLIPS = {
    "kv: no positions": (ex.check_kv_cache_step, kv_cache_logits, dict(pass_positions=False), "positions"),
    "kv: a new cache per step": (ex.check_kv_cache_step, kv_cache_logits, dict(one_cache=False), "same cache"),
    "lrt: gates swapped": (ex.check_lrt_kv_injection, lrt_kv, dict(swap_gates=True), "g_local"),
    "lrt: shared projection for per_layer": (ex.check_lrt_kv_injection, lrt_kv, dict(shared=True),
                                             "per_layer projection, layer 1"),
    "lrt: gates without the 2x": (ex.check_lrt_kv_injection, lrt_kv, dict(doubled=False), "2 \\* sigmoid"),
    "sweep: no write-back": (ex.check_gauss_seidel_sweep, gauss_seidel_sweep, dict(write_back=False), "subset s-1"),
    "sweep: no memory mask": (ex.check_gauss_seidel_sweep, gauss_seidel_sweep, dict(mask=False), "position 0"),
    "glu: paths swapped": (ex.check_glu_fusion, glu_fusion, dict(swap=True), "value path"),
    "glu: embedding not normed": (ex.check_glu_fusion, glu_fusion, dict(inner_norm=False), "normed"),
    "glu: product not normed": (ex.check_glu_fusion, glu_fusion, dict(outer_norm=False), "RMSNorm"),
    "jacobi: not shifted": (ex.check_jacobi_pass, jacobi_pass, dict(shift=False), "shift_right"),
    "jacobi: no memory mask": (ex.check_jacobi_pass, jacobi_pass, dict(mask=False), "feedback_mask"),
    "probe: KFold": (ex.check_grouped_cv_probe, grouped_cv_probe, dict(grouped=False), "split with GroupKFold"),
    "probe: scaler on all rows": (ex.check_grouped_cv_probe, grouped_cv_probe, dict(scaler_on_all_rows=True),
                                  "training rows only"),
    "trace: count every token": (ex.check_trace_length, trace_length, dict(count_all=True), "####"),
    "trace: one '#'": (ex.check_trace_length, trace_length, dict(marker_text="#"), "not one '#'"),
    "swap: its own memory": (ex.check_swap_patch, swap_patch, dict(own=True), "reading example"),
    "swap: memory of position p": (ex.check_swap_patch, swap_patch, dict(memory_of_p=True), "last position"),
    "swap: step told position 0": (ex.check_swap_patch, swap_patch, dict(step_at=0), "positions=torch.tensor"),
    "swap: cache not filled": (ex.check_swap_patch, swap_patch, dict(fill_cache=False), "fills the KV cache"),
    "distance: by the wrong norm": (ex.check_relative_distance, relative_distance, dict(by="logits"), "not of logits"),
    "distance: largest difference": (ex.check_relative_distance, relative_distance, dict(by="max_abs"),
                                     "Frobenius norm"),
    "distance: mean difference": (ex.check_relative_distance, relative_distance, dict(by="mean"), "Frobenius norm"),
    "verdict: either side reproduces": (ex.check_verdict, read_verdict, dict(use_sign=False), "paper's"),
    "verdict: seeds not counted": (ex.check_verdict, read_verdict, dict(use_seeds=False), "fewer than 3"),
    "verdict: the mean's side, not the interval's": (ex.check_verdict, read_verdict, dict(use_interval=False),
                                                     "inconclusive"),
    "jacobian: transposed": (ex.check_one_step_jacobian, one_step_jacobian, dict(transpose=True), "transpose"),
    "jacobian: at memory 0": (ex.check_one_step_jacobian, one_step_jacobian, dict(at_zero=True), "cache.state"),
    "jacobian: no prefix": (ex.check_one_step_jacobian, one_step_jacobian, dict(plain=True), "KV cache"),
    "hf: not back at the embedding's scale": (ex.check_hf_fusion, hf_fused_input, dict(rescale=False),
                                              "unit RMS.*rms\\(e\\)"),
    "hf: the gate reads the raw embedding": (ex.check_hf_fusion, hf_fused_input, dict(gate_norm=False),
                                             "gate read the raw embedding"),
    "passes: the plain mean of the counts": (ex.check_mean_passes, mean_passes, dict(weighted=False), "probability"),
    "passes: the deepest count": (ex.check_mean_passes, mean_passes, dict(deepest=True), "deepest pass count"),
    "residual: by the previous pass's norm": (ex.check_residual, residual, dict(by="prev"), "previous pass's norm"),
    "residual: no norm ratio": (ex.check_residual, residual, dict(by="none"), "absolute change"),
    "lyapunov: not renormalised": (ex.check_lyapunov_2x2, lyapunov_2x2, dict(renormalise=False), "Renormalise"),
    "lyapunov: the growth, not its log": (ex.check_lyapunov_2x2, lyapunov_2x2, dict(log=False), "not its log"),
}


SLIPS |= slips_01_03.SLIPS | slips_04.SLIPS | slips_05_07.SLIPS  # the exercises added per notebook group


def wrap(solution, **options):
    def fn(*args):
        return solution(*args, **options)
    return fn


def test_every_check_has_its_slips_tested():
    assert {check.__name__ for check, *_ in SLIPS.values()} == set(ex.CHECKS)


@pytest.mark.parametrize("name", sorted({check.__name__ for check, *_ in SLIPS.values()}))
def test_the_slip_helpers_without_a_slip_pass(name):
    """The test's own helpers are right when no slip is switched on (so each slip is what fails)."""
    check, solution = next((c, s) for c, s, _, _ in SLIPS.values() if c.__name__ == name)
    with torch.no_grad():
        assert check(solution) is solution


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_check_fails_on_its_hints_slip(slip):
    check, solution, wrong, message = SLIPS[slip]
    with torch.no_grad(), pytest.raises(AssertionError, match=message):
        check(wrap(solution, **wrong))


def test_checks_name_shape_and_type_mistakes():
    with pytest.raises(AssertionError, match=r"prefill=1.*\(3, 8, 29\).*\(3, 9, 29\)"):
        ex.check_kv_cache_step(lambda model, idx, prefill: model(idx)[:, :-1])
    with pytest.raises(AssertionError, match="list"):
        ex.check_glu_fusion(lambda model, tokens, memory: memory.tolist())
    with pytest.raises(AssertionError, match="fn.*Tensor"):
        ex.check_lrt_kv_injection(lambda model, layer, x, k, v, memory: k)
    with pytest.raises(AssertionError, match="fn.*list"):
        ex.check_grouped_cv_probe(lambda features, labels, groups, folds: [0.5])
    with pytest.raises(AssertionError, match="fn.*Tensor"):
        ex.check_relative_distance(lambda logits, exact: logits - exact)


def test_wrong_positions_are_named():
    """Without memory write-back, S = 2 is right on subset 0 (it reads the init pass anyway) and wrong on
    subset 1 from position 3 on: the message names exactly those positions."""
    with torch.no_grad(), pytest.raises(AssertionError, match="subsets=2") as error:
        ex.check_gauss_seidel_sweep(wrap(gauss_seidel_sweep, write_back=False))
    named = json.loads(str(error.value).split("positions ")[1].split("]")[0] + "]")
    assert named and all(t % 2 == 1 and t >= 3 for t in named)


def test_checks_accept_a_trained_model():
    """A notebook passes its own (float32) model: the check runs the solution on it too."""
    config = wb.ModelConfig(vocab_size=40, n_layer=1, n_head=2, n_embd=16, seq_len=16, mechanism="fbt",
                            tie_embeddings=True)
    model = wb.build_model(config).eval()
    ex.check_glu_fusion(sol.glu_fusion, model=model)
    ex.check_kv_cache_step(sol.cached_logits, model=model)
    ex.check_relative_distance(sol.relative_distance, model=model, idx=torch.randint(0, 40, (2, 16)))
