"""Reference solutions of the notebooks' exercises, one function per exercise, named as in its notebook.

A notebook shows each one folded away under its exercise (a ``<details>`` cell whose code is this
module's source, kept equal by ``tests/e2e/test_exercises_notebooks.py``), and its check falls back on it while
the learner's cell is still the stub, so the cells below the check run either way. CI runs every
check on these functions: each must pass.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.preprocessing import StandardScaler

from ..functional import norm
from ..kv_cache import KVBuffer
from ..model import GPT
from ..schedules import Sequential, feedback_mask, shift_right
from ..tasks import ANSWER_MARKER, Task


# 00
def relative_distance(logits: torch.Tensor, exact: torch.Tensor) -> float:
    return float((logits - exact).double().norm() / exact.double().norm())  # ||L - L*|| / ||L*||, all entries


# 01
def cached_logits(model: GPT, idx: torch.Tensor, prefill: int) -> torch.Tensor:
    cache = model.new_kv_cache(batch=idx.size(0), max_len=idx.size(1))
    pieces = [model.step(idx[:, :prefill], kv=cache).logits]  # prefill: `prefill` positions in one forward
    for t in range(prefill, idx.size(1)):  # then one position per forward, reading the cache
        pieces.append(model.step(idx[:, t:t + 1], positions=torch.tensor([t]), kv=cache).logits)
    return torch.cat(pieces, dim=1)


# 02
def gated_kv(model: GPT, layer: int, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lrt, c = model.mechanism, model.config
    B, T = x.shape[:2]
    gates = 2 * torch.sigmoid(x[..., : c.gate_channels] @ lrt.gates[layer].weight.T).view(B, T, 2, c.kv_heads, 1)
    g_local, g_feedback = gates[:, :, 0], gates[:, :, 1]
    proj = 0 if c.lrt_projection == "shared" else layer
    k_rec = (memory @ lrt.rec_k[proj].weight.T).view(B, T, c.kv_heads, c.head_dim)
    v_rec = (memory @ lrt.rec_v[proj].weight.T).view(B, T, c.kv_heads, c.head_dim)
    return g_local * k + g_feedback * k_rec, g_local * v + g_feedback * v_rec


# 03
def sweep(model: GPT, idx: torch.Tensor, subsets: int) -> torch.Tensor:
    B, T = idx.shape
    reads = feedback_mask(B, T)  # position 0 reads no memory
    buffer = KVBuffer(model.config.n_layer, subsets)
    init = model.step(idx, kv=buffer)
    memory = [init.memory[:, s::subsets] for s in range(subsets)]  # the latest estimate, by subset
    logits = torch.empty_like(init.logits)
    for s in range(subsets):
        positions = buffer.refine(s)
        # m_{t-1} for t = s, s+S, ...: subset s-1's latest, or for s = 0 subset S-1's, one step back
        previous = memory[s - 1] if s > 0 else torch.nn.functional.pad(memory[-1], (0, 0, 1, 0))
        out = model.step(idx[:, s::subsets], memory=previous[:, : positions.numel()],
                         memory_mask=reads[:, s::subsets], positions=positions, kv=buffer)
        memory[s] = out.memory  # written back: the next subset reads it
        logits[:, s::subsets] = out.logits
    return logits


def mean_passes(mix: dict[int, float]) -> float:
    return float(sum(passes * p for passes, p in mix.items()))  # each pass count weighed by how often it is drawn


# 04
def glu_fusion(model: GPT, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    fbt = model.mechanism
    gate = torch.sigmoid(fbt.W_G(norm(model.wte(tokens))))  # the token, normed, only gates
    return norm(fbt.W_U(memory) * gate)  # the state carries the value


def jacobi_pass(model: GPT, idx: torch.Tensor, previous: torch.Tensor | None) -> torch.Tensor:
    if previous is None:  # pass 1: plain
        return model.step(idx).memory
    reads = feedback_mask(*idx.shape)  # position 0 never reads
    return model.step(idx, memory=shift_right(previous), memory_mask=reads).memory


# 06
def residual(prev: torch.Tensor, new: torch.Tensor) -> float:
    return float((new - prev).double().norm() / new.double().norm())  # the change, relative to the new pass


def one_step_jacobian(model: GPT, idx: torch.Tensor, t: int) -> torch.Tensor:
    B = idx.size(0)
    cache = model.new_kv_cache(B, t + 1)
    with torch.no_grad():
        Sequential().prefill(model, idx[:, :t], cache)  # the exact recurrence over positions < t
    point = cache.state  # m_{t-1}: the memory position t reads

    def step(memory: torch.Tensor) -> torch.Tensor:  # position t alone, attending to the held prefix
        out = model.step(idx[:, t:t + 1], memory=memory[:, None], positions=torch.tensor([t]),
                         kv=copy.deepcopy(cache))  # a copy: the step writes position t into its cache
        return out.memory[:, 0]

    full = torch.autograd.functional.jacobian(step, point)  # (B, D, B, D): examples are independent
    return torch.stack([full[b, :, b] for b in range(B)])  # row i: d m_t[i] / d m_{t-1}


def lyapunov_2x2(A: torch.Tensor, steps: int) -> float:
    v = torch.tensor([1.0, 0.0], dtype=torch.float64)  # a unit vector
    total = 0.0
    for _ in range(steps):
        v = A.double() @ v
        growth = v.norm()  # how far this step stretched a unit vector
        total += float(torch.log(growth))
        v = v / growth  # back to unit length: A^n v itself would overflow or underflow
    return total / steps


# 05
def grouped_cv_probe(features: np.ndarray, labels: np.ndarray, groups: np.ndarray, folds: int) -> float:
    scores = []
    for train, test in GroupKFold(n_splits=folds).split(features, labels, groups):
        scaler = StandardScaler().fit(features[train])  # statistics of the training rows only
        probe = LogisticRegression(C=0.1).fit(scaler.transform(features[train]), labels[train])
        scores.append(probe.score(scaler.transform(features[test]), labels[test]))
    return float(np.mean(scores))


# 05b
def swap_patch(model: GPT, tokens: torch.Tensor, i: int, j: int, p: int) -> torch.Tensor:
    with torch.no_grad():
        mate_memory = model.step(tokens[j:j + 1, :p]).memory[:, -1:]  # m_{p-1} of j's plain prefill
        cache = model.new_kv_cache(1, p + 1)
        model.step(tokens[i:i + 1, :p], kv=cache)  # i's own plain prefill fills the cache
        out = model.step(tokens[i:i + 1, p:p + 1], memory=mate_memory, positions=torch.tensor([p]), kv=cache)
    return out.logits[0, -1]


# 07
def trace_length(task: Task, generated: list[int]) -> int:
    marker = task.tokenizer.encode(ANSWER_MARKER)  # "####": four ids, searched as one sub-list
    for i in range(len(generated) - len(marker) + 1):
        if generated[i:i + len(marker)] == marker:
            return i
    return len(generated)


# 08
def read_verdict(interval: dict[str, float], expected_sign: int) -> str:
    if interval["seeds"] < 3:  # too few training seeds per arm to read an interval
        return f"not tested: seeds = {interval['seeds']} (needs >= 3)"
    if interval["low"] > 0 or interval["high"] < 0:  # the interval excludes 0: on which side?
        side = 1 if interval["low"] > 0 else -1
        return "reproduces" if side == expected_sign else "does not reproduce"
    return "inconclusive"


# 09
def hf_fused_input(model, input_ids: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    fusion = model.mechanism.fusion
    e = model.hf.get_input_embeddings()(input_ids)  # the HF model's own embedding, at its raw scale
    rms = e.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return norm(fusion.W_U(memory) * torch.sigmoid(fusion.W_G(norm(e)))) * rms  # back to e's scale
