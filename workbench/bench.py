"""Benchmarks that report ratios measured within one run.

Absolute milliseconds depend on the machine and on its neighbours; a ratio of two timings taken
seconds apart in the same process mostly does not. Each row times one thing (median of several
repeats after a warm-up) and divides it by its reference row; ``target`` is the ratio an issue asked
for, and ``ok`` says whether this run met it. Nothing here asserts: tests never time anything.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch

from . import schedules
from .config import ModelConfig
from .decode import generate
from .model import GPT, build_model


@dataclass
class Row:
    name: str
    seconds: float
    reference: str | None = None  # name of the row this one is divided by
    target: float | None = None  # the ratio asked for (this row / reference <= target)
    unit: str = "step"


def time_call(fn: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """Median wall time of ``fn`` in seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _model(mechanism: str, n_layer: int, n_embd: int, vocab: int, seq_len: int, **kw) -> GPT:
    cfg = ModelConfig(vocab_size=vocab, n_layer=n_layer, n_head=max(1, n_embd // 64), n_embd=n_embd,
                      seq_len=seq_len, mechanism=mechanism, tie_embeddings=mechanism == "fbt", **kw)
    torch.manual_seed(0)
    return build_model(cfg)


def train_step_fn(model: GPT, batch: int, seq_len: int, schedule: str = "single",
                  **schedule_kw) -> Callable[[], None]:
    """One forward + backward + AdamW step under a schedule, on random tokens."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, model.config.vocab_size, (batch, seq_len))
    targets = torch.randint(0, model.config.vocab_size, (batch, seq_len))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        schedules.run(model, idx, schedule, **schedule_kw).loss(targets).backward()
        opt.step()

    return step


def recompute_decode_fn(model: GPT, prompt: torch.Tensor, new_tokens: int) -> Callable[[], None]:
    """Greedy decoding without a cache: a full forward over the whole prefix for every token."""

    @torch.no_grad()
    def run() -> None:
        idx = prompt
        for _ in range(new_tokens):
            idx = torch.cat([idx, model(idx)[:, -1:].argmax(-1)], dim=1)

    return run


def run_benchmarks(quick: bool = False, threads: int = 2) -> pd.DataFrame:
    """Every row; ``quick`` shrinks repeats and lengths so the suite can smoke-test it."""
    torch.set_num_threads(threads)
    rep = 1 if quick else 5
    batch, T, vocab = (2, 16, 64) if quick else (16, 128, 256)
    new = 8 if quick else 128
    fused_passes = 10 if quick else 1000
    rows: list[Row] = []

    small = _model("none", 4, 128, vocab, T)
    rows.append(Row("train step 4x128 baseline", time_call(train_step_fn(small, batch, T), rep)))
    wide = _model("none", 6, 256, vocab, T)
    rows.append(Row("train step 6x256 baseline", time_call(train_step_fn(wide, batch, T), rep),
                    "train step 4x128 baseline"))
    lrt = _model("lrt", 4, 128, vocab, T, lrt_gamma_init=0.1)
    for s, target in ((2, 2.2), (4, None)):
        rows.append(Row(f"train step 4x128 LRT interleaved S={s}",
                        time_call(train_step_fn(lrt, batch, T, "interleaved", subsets=s), rep),
                        "train step 4x128 baseline", target))
    fbt = _model("fbt", 4, 128, vocab, T)
    for k, target in ((2, 2.1), (3, 3.1)):
        rows.append(Row(f"train step 4x128 FBT {k}-pass",
                        time_call(train_step_fn(fbt, batch, T, "multipass", passes=k), rep),
                        "train step 4x128 baseline", target))

    for m in (small, lrt, fbt):
        m.eval()
    prompt = torch.randint(0, vocab, (1, 1))

    def decode(model: GPT, regime: str) -> float:
        return time_call(lambda: generate(model, prompt, new, regime=regime), rep) / new

    rows.append(Row("decode 4x128 recompute prefix", time_call(recompute_decode_fn(small, prompt, new), rep) / new,
                    unit="token"))
    rows.append(Row("decode 4x128 KV cache", decode(small, "standard"), "decode 4x128 recompute prefix",
                    1 / 3, unit="token"))
    rows.append(Row("decode 4x128 LRT soft", decode(lrt, "soft"), "decode 4x128 KV cache", 1.05, unit="token"))
    rows.append(Row("decode 4x128 FBT standard", decode(fbt, "standard"), None, unit="token"))
    rows.append(Row("decode 4x128 FBT soft", decode(fbt, "soft"), "decode 4x128 FBT standard", 1.02, unit="token"))

    idx = torch.randint(0, vocab, (batch, T))
    with torch.no_grad():
        rows.append(Row("forward 4x128 FBT one pass", time_call(lambda: fbt(idx), rep)))
        passes = time_call(lambda: _drain(schedules.iterate_passes(fbt, idx, passes=fused_passes)), 1, warmup=0)
    rows.append(Row(f"fused prefill per pass ({fused_passes} passes)", passes / fused_passes,
                    "forward 4x128 FBT one pass", 1.1))
    return _table(rows)


def _drain(iterator) -> None:
    for _ in iterator:
        pass


def _table(rows: list[Row]) -> pd.DataFrame:
    by_name = {r.name: r for r in rows}
    records = []
    for r in rows:
        ratio = r.seconds / by_name[r.reference].seconds if r.reference else None
        records.append({"benchmark": r.name, "ms": 1000 * r.seconds, "per": r.unit, "reference": r.reference or "",
                        "ratio": ratio, "target": r.target,
                        "ok": None if r.target is None or ratio is None else bool(ratio <= r.target)})
    return pd.DataFrame.from_records(records)
