"""Logit lens across passes: what the stream at an answer position says about the answer per pass and depth."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from .. import schedules
from ..fast import ops
from ..model import GPT, eval_mode
from ..validation import check_int, check_tokens
from .cache import run_with_cache

LENS_COLUMNS = ["pass", "depth", "lens", "answer_rank", "answer_prob", "top1_is_answer"]


@dataclass
class TunedLens:
    """One affine map per depth, carrying that depth's stream to the final one."""

    weights: list[torch.Tensor]  # (D + 1, D) per depth: [h, 1] @ W ~ final stream

    def apply(self, depth: int, resid: torch.Tensor) -> torch.Tensor:
        w = self.weights[depth].to(resid)
        return torch.cat([resid, torch.ones_like(resid[..., :1])], dim=-1) @ w


def _readout(model: GPT, stream: torch.Tensor) -> torch.Tensor:
    """Logits of a pre-norm residual stream, read as the model reads its final one."""
    logits = F.linear(ops().norm(stream), model.readout_weight.to(stream))
    cap = model.config.logit_softcap
    return cap * torch.tanh(logits / cap) if cap > 0 else logits


def _answer_streams(model: GPT, idx: torch.Tensor, where: torch.Tensor, passes: int) -> tuple[torch.Tensor, ...]:
    """Per pass at ``where``: the stream (passes, L+1, B, D), the memory read and the input (passes, B, D)."""
    _, cache = run_with_cache(model, idx, schedules.Multipass(passes), positions=where[:, None],
                              names_filter=lambda n: n in ("hook_input", "hook_memory_in")
                              or n.endswith("hook_resid_post"))
    resid = torch.stack([cache.pass_(k).accumulated_resid() for k in range(1, cache.n_passes + 1)])
    memory = torch.stack([cache.pass_(k)["hook_memory_in"] if k > 1 else torch.zeros_like(resid[0, 0])
                          for k in range(1, cache.n_passes + 1)])
    return resid, memory, cache.stack_passes("hook_input")


@torch.no_grad()
def fit_tuned_lens(model: GPT, idx: torch.Tensor, where: torch.Tensor, passes: int = 1,
                   ridge: float = 1e-3) -> TunedLens:
    """An affine tuned lens by ridge least squares, pooled over passes; fit it on held-out prompts."""
    with eval_mode(model):
        resid, _, _ = _answer_streams(model, idx, where, passes)
    D = resid.size(-1)
    final = resid[:, -1].reshape(-1, D).double()
    weights = []
    for depth in range(resid.size(1) - 1):
        x = resid[:, depth].reshape(-1, D).double()
        x = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
        gram = x.T @ x + ridge * x.size(0) * torch.eye(x.size(1), dtype=torch.float64)
        weights.append(torch.linalg.solve(gram, x.T @ final))
    weights.append(torch.cat([torch.eye(D, dtype=torch.float64), torch.zeros(1, D, dtype=torch.float64)]))
    return TunedLens(weights)


def _rank_row(model: GPT, stream: torch.Tensor, answer: torch.Tensor, k: int, depth: int, lens: str) -> dict:
    """One ``LENS_COLUMNS`` row: where ``answer`` ranks in what ``stream`` reads out as, over the batch."""
    logits = _readout(model, stream)
    probs = logits.float().softmax(-1)
    rank = (logits > logits.gather(-1, answer[:, None])).sum(-1).float()
    return {"pass": k, "depth": depth, "lens": lens, "answer_rank": float(rank.mean()),
            "answer_prob": float(probs.gather(-1, answer[:, None]).mean()),
            "top1_is_answer": float((logits.argmax(-1) == answer).float().mean())}


@torch.no_grad()
def fed_back_lens(model: GPT, idx: torch.Tensor, where: torch.Tensor, answer: torch.Tensor, passes: int,
                  tuned: TunedLens | None = None) -> dict[str, pd.DataFrame]:
    """What the stream at ``where`` says about ``answer`` per pass (depth -1: the fed-back memory)."""
    check_tokens(model.config.vocab_size, idx)
    check_int("passes", passes, 1, 100_000)
    B = idx.size(0)
    if where.shape != (B,) or answer.shape != (B,):
        raise ValueError(f"where and answer must have shape ({B},)")
    with eval_mode(model):
        resid, memory, inputs = _answer_streams(model, idx, where, passes)
        rows, finals = [], []
        for k in range(passes):
            for depth in range(resid.size(1)):
                rows.append(_rank_row(model, resid[k, depth], answer, k + 1, depth, "logit"))
                if tuned is not None:
                    rows.append(_rank_row(model, tuned.apply(depth, resid[k, depth]), answer, k + 1, depth, "tuned"))
            if k > 0:
                rows.append(_rank_row(model, memory[k], answer, k + 1, -1, "memory"))
            finals.append(_readout(model, resid[k, -1]).argmax(-1))
    flips = pd.DataFrame({"pass": np.arange(2, passes + 1),
                          "flip_share": [float((finals[k] != finals[k - 1]).float().mean()) for k in range(1, passes)]})
    plain = inputs[0]
    rms = lambda x: x.pow(2).mean(-1).sqrt()  # noqa: E731
    inp = pd.DataFrame({"pass": np.arange(1, passes + 1),
                        "input_cosine": [float(F.cosine_similarity(inputs[k], plain, dim=-1).mean())
                                         for k in range(passes)],
                        "memory_rms_ratio": [float((rms(memory[k]) / rms(plain)).mean()) for k in range(passes)]})
    return {"lens": pd.DataFrame(rows, columns=LENS_COLUMNS), "flips": flips, "input": inp}
