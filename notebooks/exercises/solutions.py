"""Reference solutions of the notebooks' exercises, one function per exercise, named as in its notebook.

A notebook shows each one folded away under its exercise (a ``<details>`` cell whose code is this
module's source, kept equal by ``tests/e2e/test_exercises_notebooks.py``), and its check falls back on it while
the learner's cell is still the stub, so the cells below the check run either way. CI runs every
check on these functions: each must pass.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.preprocessing import StandardScaler

from workbench.analysis.cache import ActivationCache
from workbench.config import ModelConfig
from workbench.functional import norm
from workbench.kv_cache import KVBuffer
from workbench.model import GPT
from workbench.schedules import Sequential, feedback_mask, shift_right
from workbench.tasks import ANSWER_MARKER, Task


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


def rope(vec: torch.Tensor, position: int, base: float) -> torch.Tensor:
    d = vec.size(-1)
    theta = base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)  # one frequency per pair
    cos, sin = (position * theta).cos().to(vec.dtype), (position * theta).sin().to(vec.dtype)
    a, b = vec[..., : d // 2], vec[..., d // 2:]  # pair i: channel i with channel i + d/2
    return torch.cat([a * cos + b * sin, b * cos - a * sin], dim=-1)


def kv_cache_bytes(config: ModelConfig, batch: int, max_len: int, dtype: torch.dtype) -> int:
    per_layer = 2 * batch * config.kv_heads * max_len * config.head_dim  # keys and values, per key/value head
    return config.n_layer * per_layer * dtype.itemsize


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


def memory_read(model: GPT, cache: ActivationCache) -> torch.Tensor:
    source = model.mechanism.source_layer % model.config.n_layer  # -1: the top block
    memory = norm(cache[f"blocks.{source}.hook_resid_post"])  # m_t: the source block's output, RMS-normed
    return shift_right(memory)  # position t reads m_{t-1}; position 0 reads zeros


def pooled_weights(seq_len: int, decay: float) -> torch.Tensor:
    W = torch.zeros(seq_len, seq_len, dtype=torch.float64)
    W[0, 0] = 1.0  # position 0 reads no memory: its average starts at its own state, p_0 = h_0
    for t in range(1, seq_len):
        W[t] = decay * W[t - 1]  # p_t = decay * p_{t-1} + (1 - decay) * h_t
        W[t, t] = 1 - decay
    return W


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


def token_flops(model: GPT, seq_len: int) -> float:
    groups, c = model.num_params_by_group(), model.config
    readout = groups["readout"] or groups["embedding"]  # tied: the embedding matrix is the readout
    weights = groups["blocks"] + groups["mechanism"] + readout  # the lookup E[token] multiplies nothing
    return 6.0 * weights + 12.0 * c.n_layer * c.n_embd * seq_len  # 2 forward + 4 backward per weight; attention


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


def soft_logits(model: GPT, idx: torch.Tensor, prompt_len: int) -> torch.Tensor:
    cache = model.new_kv_cache(batch=idx.size(0), max_len=idx.size(1))
    out = model.step(idx[:, :prompt_len], kv=cache)  # the prompt: one plain pass, reading no memory
    logits, memory = [out.logits], out.memory[:, -1:]  # m_{P-1}: what the first token after it reads
    for t in range(prompt_len, idx.size(1)):  # then one token per forward, through the same cache
        out = model.step(idx[:, t:t + 1], memory=memory, positions=torch.tensor([t]), kv=cache)
        logits.append(out.logits)
        memory = out.memory  # m_t: what position t + 1 reads
    return torch.cat(logits, dim=1)


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
def majority_rate(labels: np.ndarray, groups: np.ndarray, folds: int) -> float:
    scores = []
    for train, test in GroupKFold(n_splits=folds).split(labels, labels, groups):
        values, counts = np.unique(labels[train], return_counts=True)
        guess = values[np.argmax(counts)]  # the training rows' most frequent label: no held-out label seen
        scores.append(np.mean(labels[test] == guess))
    return float(np.mean(scores))


def grouped_cv_probe(features: np.ndarray, labels: np.ndarray, groups: np.ndarray, folds: int) -> float:
    scores = []
    for train, test in GroupKFold(n_splits=folds).split(features, labels, groups):
        scaler = StandardScaler().fit(features[train])  # statistics of the training rows only
        probe = LogisticRegression(C=0.1).fit(scaler.transform(features[train]), labels[train])
        scores.append(probe.score(scaler.transform(features[test]), labels[test]))
    return float(np.mean(scores))


def layer_features(cache: ActivationCache, depth: int, k: int, positions: torch.Tensor) -> torch.Tensor:
    name = "hook_input" if depth == 0 else f"blocks.{depth - 1}.hook_resid_post"  # depth l: block l-1's output
    acts = cache.pass_(k)[name]  # (B, T, D) of pass k, passes counted from 1
    return acts[torch.arange(acts.size(0)), positions]  # each example at its own position


# 05b
def flip_rate(clean: torch.Tensor, edited: torch.Tensor, answers: torch.Tensor, foils: torch.Tensor) -> float:
    rows = torch.arange(len(answers))
    before = clean[rows, answers] >= clean[rows, foils]  # the answer preferred to its foil, before the edit
    after = edited[rows, answers] >= edited[rows, foils]
    return float((before != after).double().mean())  # a flip: the preference changed, whichever way


def swap_patch(model: GPT, tokens: torch.Tensor, i: int, j: int, p: int) -> torch.Tensor:
    with torch.no_grad():
        mate_memory = model.step(tokens[j:j + 1, :p]).memory[:, -1:]  # m_{p-1} of j's plain prefill
        cache = model.new_kv_cache(1, p + 1)
        model.step(tokens[i:i + 1, :p], kv=cache)  # i's own plain prefill fills the cache
        out = model.step(tokens[i:i + 1, p:p + 1], memory=mate_memory, positions=torch.tensor([p]), kv=cache)
    return out.logits[0, -1]


def paired_interval(values: np.ndarray, reference: np.ndarray, groups: np.ndarray, n_boot: int,
                    seed: int) -> dict[str, float]:
    diff = np.asarray(values, dtype=np.float64) - np.asarray(reference, dtype=np.float64)  # one per example
    members = [diff[groups == g] for g in np.unique(groups)]  # a group's examples share their context
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        drawn = rng.integers(0, len(members), len(members))  # whole groups, with replacement
        boot.append(np.concatenate([members[i] for i in drawn]).mean())
    low, high = np.percentile(boot, [2.5, 97.5])
    return {"mean": float(diff.mean()), "low": float(low), "high": float(high)}


# 07
def trace_length(task: Task, generated: list[int]) -> int:
    marker = task.tokenizer.encode(ANSWER_MARKER)  # "####": four ids, searched as one sub-list
    for i in range(len(generated) - len(marker) + 1):
        if generated[i:i + len(marker)] == marker:
            return i
    return len(generated)


def decode_forwards(regime: str, prompt_len: int, new_tokens: int, prefill_passes: int) -> int:
    prefill = {"standard": 1, "soft": 1,  # one plain pass over the prompt
               "soft_last": 2,  # a plain pass over all but the last prompt token, then that token by the recurrence
               "fused": 1 + prefill_passes,  # a plain pass, then prefill_passes Jacobi passes
               "sequential": prompt_len}[regime]  # the exact recurrence: one prompt token per forward
    return prefill + new_tokens - 1  # the prefill's last logits choose the first new token


def median_length_difference(traces: pd.DataFrame, regime: str) -> float:
    differences = []
    for _, run in traces.groupby("run"):  # one seed at a time: both regimes decoded its weights
        median = run.groupby("regime")["length"].median()
        differences.append(median[regime] - median["standard"])
    return float(np.mean(differences))  # the seeds' differences of medians, averaged


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
