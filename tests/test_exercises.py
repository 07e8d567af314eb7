"""Every exercise check passes on a reference solution and fails, with a helpful message, on a wrong one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold, KFold
from sklearn.preprocessing import StandardScaler

import workbench as wb
from workbench import exercises as ex
from workbench.kv_cache import KVBuffer, interleave
from workbench.mechanisms import norm
from workbench.schedules import feedback_mask, shift_right


# ---------------------------------------------------------------------------------------------- solutions
def kv_cache_logits(model, idx, prefill, *, pass_positions=True):
    cache = model.new_kv_cache(idx.size(0), idx.size(1))
    pieces = [model.step(idx[:, :prefill], kv=cache).logits]
    for t in range(prefill, idx.size(1)):
        positions = torch.tensor([t]) if pass_positions else None
        pieces.append(model.step(idx[:, t:t + 1], positions=positions, kv=cache).logits)
    return torch.cat(pieces, dim=1)


def lrt_kv(model, layer, x, k, v, memory, *, swap_gates=False):
    lrt = model.mechanism
    gates = 2 * torch.sigmoid(x[..., :lrt.gate_channels] @ lrt.gates[layer].weight.T)
    gates = gates.view(*x.shape[:2], 2, lrt.kv_heads, 1)
    g_local, g_feedback = gates.unbind(2)
    if swap_gates:
        g_local, g_feedback = g_feedback, g_local
    proj = 0 if len(lrt.rec_k) == 1 else layer
    shape = (*memory.shape[:2], lrt.kv_heads, lrt.head_dim)
    k_rec = (memory @ lrt.rec_k[proj].weight.T).view(shape)
    v_rec = (memory @ lrt.rec_v[proj].weight.T).view(shape)
    return g_local * k + g_feedback * k_rec, g_local * v + g_feedback * v_rec


def gauss_seidel_sweep(model, idx, subsets, *, write_back=True):
    B, T = idx.shape
    reads = feedback_mask(B, T)
    buffer = KVBuffer(model.config.n_layer, subsets)
    init = model.step(idx, kv=buffer)
    memory = init.memory.clone()
    logits = []
    for s in range(subsets):
        positions = buffer.refine(s)
        previous = shift_right(memory)[:, s::subsets]
        out = model.step(idx[:, s::subsets], memory=previous, memory_mask=reads[:, s::subsets],
                         positions=positions, kv=buffer)
        if write_back:
            memory[:, s::subsets] = out.memory
        logits.append(out.logits)
    return interleave(logits, 1, T)


def glu_fusion(model, tokens, memory, *, swap=False):
    fbt = model.mechanism
    e = norm(model.wte(tokens))
    value, gate = (fbt.W_U(e), fbt.W_G(memory)) if swap else (fbt.W_U(memory), fbt.W_G(e))
    return norm(value * torch.sigmoid(gate))


def jacobi_pass(model, idx, previous, *, shift=True):
    if previous is None:
        return model.step(idx).memory
    memory = shift_right(previous) if shift else previous
    return model.step(idx, memory=memory, memory_mask=feedback_mask(*idx.shape)).memory


def grouped_cv_probe(features, labels, groups, folds, *, grouped=True):
    splitter = GroupKFold(n_splits=folds) if grouped else KFold(n_splits=folds, shuffle=True, random_state=0)
    scores = []
    for train, test in splitter.split(features, labels, groups if grouped else None):
        scaler = StandardScaler().fit(features[train])
        probe = LogisticRegression(C=0.1).fit(scaler.transform(features[train]), labels[train])
        scores.append(probe.score(scaler.transform(features[test]), labels[test]))
    return float(np.mean(scores))


def trace_length(task, generated, *, count_all=False):
    marker = task.tokenizer.encode(wb.tasks.ANSWER_MARKER)
    if not count_all:
        for i in range(len(generated) - len(marker) + 1):
            if generated[i:i + len(marker)] == marker:
                return i
    return len(generated)


CASES = {
    "kv_cache_step": (ex.check_kv_cache_step, kv_cache_logits, dict(pass_positions=False), "positions"),
    "lrt_kv_injection": (ex.check_lrt_kv_injection, lrt_kv, dict(swap_gates=True), "g_local"),
    "gauss_seidel_sweep": (ex.check_gauss_seidel_sweep, gauss_seidel_sweep, dict(write_back=False), "subset s-1"),
    "glu_fusion": (ex.check_glu_fusion, glu_fusion, dict(swap=True), "value path"),
    "jacobi_pass": (ex.check_jacobi_pass, jacobi_pass, dict(shift=False), "shift_right"),
    "grouped_cv_probe": (ex.check_grouped_cv_probe, grouped_cv_probe, dict(grouped=False), "GroupKFold"),
    "trace_length": (ex.check_trace_length, trace_length, dict(count_all=True), "####"),
}


def wrap(solution, **options):
    def fn(*args):
        return solution(*args, **options)
    return fn


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_passes_on_the_solution(name, capsys):
    check, solution, _, _ = CASES[name]
    with torch.no_grad():
        check(solution)
    assert capsys.readouterr().out.startswith("ok:")


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_fails_on_a_wrong_implementation(name):
    check, solution, wrong, hint = CASES[name]
    with torch.no_grad(), pytest.raises(AssertionError, match=hint):
        check(wrap(solution, **wrong))


def test_checks_name_shape_and_type_mistakes():
    with pytest.raises(AssertionError, match=r"prefill=1: shape \(3, 8, 29\), expected \(3, 9, 29\)"):
        ex.check_kv_cache_step(lambda model, idx, prefill: model(idx)[:, :-1])
    with pytest.raises(AssertionError, match="expected a tensor"):
        ex.check_glu_fusion(lambda model, tokens, memory: memory.tolist())
    with pytest.raises(AssertionError, match=r"\(keys, values\)"):
        ex.check_lrt_kv_injection(lambda model, layer, x, k, v, memory: k)


def test_wrong_positions_are_named():
    """Without memory write-back, S = 2 is right on subset 0 (it reads the init pass anyway) and wrong on
    subset 1 from position 3 on: the message names exactly those positions."""
    with torch.no_grad(), pytest.raises(AssertionError, match=r"lrt, subsets=2: differs at positions") as error:
        ex.check_gauss_seidel_sweep(wrap(gauss_seidel_sweep, write_back=False))
    named = json.loads(str(error.value).split("positions ")[1].split("]")[0] + "]")
    assert named and all(t % 2 == 1 and t >= 3 for t in named)


def test_checks_accept_a_trained_model():
    """A notebook passes its own (float32) model: the check runs the solution on it too."""
    config = wb.ModelConfig(vocab_size=40, n_layer=1, n_head=2, n_embd=16, seq_len=16, mechanism="fbt",
                            tie_embeddings=True)
    model = wb.build_model(config).eval()
    ex.check_glu_fusion(glu_fusion, model=model)
    ex.check_kv_cache_step(kv_cache_logits, model=model)
