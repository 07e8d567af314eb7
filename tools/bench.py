"""Benchmarks that report ratios measured within one run: ``make bench`` (``python tools/bench.py --help``).

Absolute milliseconds depend on the machine and on its neighbours; a ratio of two timings taken
seconds apart in the same process mostly does not. Each row times one thing (several rounds after
a warm-up, keeping the fastest: a busy neighbour only ever adds time) and is divided by its
reference row; ``target`` is the ratio an issue asked for, and ``ok`` says whether this run met
it. ``floor`` is the ratio the arithmetic alone allows (estimated FLOPs of the row over its
reference's): a target below the floor cannot be met at that model size by any implementation,
and the gap above it is overhead. ``util`` is the row's model FLOP/s as a fraction of a float32
matmul timed in the same rounds (the machine's practical peak): how far that shape is from the limit.
``faults`` is the median number of minor page faults per unit: memory the allocator handed back to
the OS and touched again, a cost that depends on the allocator's heuristics rather than on the code.

Ablation rows: the 4x128 baseline without each of the nanochat block's extra elementwise features
(logit softcap, QK-norm, RoPE) that nanoGPT's block does not have, divided by the baseline: what
each costs, measured in the same rounds.

nanoGPT rows: with ``nanogpt`` (or the environment variable ``WORKBENCH_NANOGPT``) naming nanoGPT's
``model.py`` (github.com/karpathy/nanoGPT, fetched by the user, never vendored), its training step
is timed beside ours at the same shapes (no biases, no dropout, AdamW, the same batch) and our
baseline is divided by it. Nothing here asserts: tests never time anything.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pandas as pd
import torch

from workbench import fast, schedules
from workbench.config import ModelConfig
from workbench.decode import generate
from workbench.model import GPT, build_model
from workbench.validation import check_int


@dataclass
class Row:
    name: str
    fn: Callable[[], object] | None  # the work timed (None: reuse the timings of ``timing_of``)
    reference: str | None = None  # name of the row this one is divided by
    target: float | None = None  # the ratio asked for (this row / reference <= target)
    unit: str = "step"
    per: int = 1  # the timing is divided by this (tokens per call for decode rows)
    rounds: int | None = None  # fewer rounds for a long row (None = all)
    flops: float | None = None  # estimated FLOPs per unit, for the ``floor`` and ``util`` columns
    timing_of: str | None = None  # a row already timed: this one divides the same timings by another reference


@dataclass
class Timings:
    """Every round of every row: seconds per unit, and minor page faults per unit (None where the OS
    does not count them)."""

    seconds: dict[str, list[float]]
    faults: dict[str, list[float | None]]

    def __ior__(self, other: Timings) -> Timings:
        self.seconds |= other.seconds
        self.faults |= other.faults
        return self


def _minor_faults() -> int | None:
    """Minor page faults of this process so far (Unix); None elsewhere."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(rows: list[Row], rounds: int) -> Timings:
    """Seconds (and page faults) per unit of every row in every round, timed round-robin.

    One round times every row once, so a change in the machine's load during the run hits a row
    and its reference alike instead of biasing whichever was timed last.
    """
    rows = [row for row in rows if row.timing_of is None]
    for row in rows:  # warm-up: allocator, first-call dispatch, compiling
        row.fn()
    timings = Timings({row.name: [] for row in rows}, {row.name: [] for row in rows})
    for r in range(rounds):
        for row in rows:
            if row.rounds is not None and r >= row.rounds:
                continue
            faults = _minor_faults()
            start = time.perf_counter()
            row.fn()
            timings.seconds[row.name].append((time.perf_counter() - start) / row.per)
            timings.faults[row.name].append(None if faults is None else (_minor_faults() - faults) / row.per)
    return timings


def _model(mechanism: str, n_layer: int, n_embd: int, vocab: int, seq_len: int, **kw) -> GPT:
    cfg = ModelConfig(vocab_size=vocab, n_layer=n_layer, n_head=max(1, n_embd // 32), n_embd=n_embd,
                      seq_len=seq_len, mechanism=mechanism, tie_embeddings=mechanism == "fbt", **kw)
    torch.manual_seed(0)
    return build_model(cfg)


def train_step_fn(model: GPT, batch: int, seq_len: int, schedule: schedules.Schedule | None = None,
                  compile: bool = False) -> Callable[[], None]:
    """One forward + backward + AdamW step under a schedule, on random tokens (``compile``: as the trainer's)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, model.config.vocab_size, (batch, seq_len))
    targets = torch.randint(0, model.config.vocab_size, (batch, seq_len))
    run = torch.compile(schedules.run) if compile else schedules.run

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        run(model, idx, schedule or schedules.Single()).loss(targets).backward()
        opt.step()

    return step


MATMUL_SIZE = 1024


def plain_path(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` run with the fast path off (``fast.disabled``): functional's plain code, nanochat's ops."""
    def run() -> None:
        with fast.disabled():
            fn()
    return run


def matmul_fn(n: int = MATMUL_SIZE) -> Callable[[], object]:
    """An n x n x n float32 matmul: the machine's practical peak for the ``util`` column."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return lambda: a @ b


def load_nanogpt(path: str | os.PathLike) -> ModuleType:
    """nanoGPT's ``model.py``, imported from the file the user fetched (never vendored here)."""
    if not Path(path).is_file():
        raise ValueError(f"nanogpt={str(path)!r} is invalid: must be the path of nanoGPT's model.py")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nanogpt_step_fn(nanogpt: ModuleType, n_layer: int, n_embd: int, vocab: int, batch: int,
                    seq_len: int) -> Callable[[], None]:
    """nanoGPT's training step at our baseline's shape: no biases, no dropout, AdamW on random tokens.

    Same matrices as ours (its tied readout is one vocab x D matrix, like our untied readout), so the
    same FLOPs; the difference is the block's elementwise work and how it is written.
    """
    cfg = nanogpt.GPTConfig(block_size=seq_len, vocab_size=vocab, n_layer=n_layer, n_head=max(1, n_embd // 32),
                            n_embd=n_embd, dropout=0.0, bias=False)
    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count
        model = nanogpt.GPT(cfg)
    return _peer_step(model, vocab, batch, seq_len, lambda idx, targets: model(idx, targets)[1])


def _peer_step(model: torch.nn.Module, vocab: int, batch: int, seq_len: int,
               loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], None]:
    """A peer model's training step as our row's: AdamW, lr 1e-4, one fixed batch of random tokens."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, vocab, (batch, seq_len))
    targets = torch.randint(0, vocab, (batch, seq_len))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss(idx, targets).backward()
        opt.step()

    return step


def load_nanochat(path: str | os.PathLike) -> ModuleType:
    """nanochat's ``gpt.py``, imported as part of the package it belongs to (its ``common``, ``optim`` and
    ``flash_attention`` modules) from the repository the user fetched: ``path`` is that repository, or
    its ``nanochat/`` folder, or ``nanochat/gpt.py`` itself. Never vendored here."""
    root = Path(path)
    root = root.parent if root.name == "gpt.py" else root
    # the package folder itself (holding gpt.py), not a clone that git named nanochat too (holding nanochat/gpt.py)
    root = root.parent if (root / "gpt.py").is_file() else root
    if not (root / "nanochat" / "gpt.py").is_file():
        raise ValueError(f"nanochat={str(path)!r} is invalid: must be nanochat's repository (holding nanochat/gpt.py)")
    sys.path.insert(0, str(root))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return importlib.import_module("nanochat.gpt")
    finally:
        sys.path.remove(str(root))


def nanochat_step_fn(nanochat: ModuleType, n_layer: int, n_embd: int, vocab: int, batch: int,
                     seq_len: int) -> Callable[[], None]:
    """nanochat's training step at our baseline's shape: full-context attention in every layer (``"L"``, as
    ours), its own init, AdamW on random tokens as our row. Its block does more than ours (value
    embeddings on some layers, a token smear): the ratio reads against that, not against equal work."""
    heads = max(1, n_embd // 32)
    cfg = nanochat.GPTConfig(sequence_len=seq_len, vocab_size=vocab, n_layer=n_layer, n_head=heads, n_kv_head=heads,
                             n_embd=n_embd, window_pattern="L")
    torch.manual_seed(0)
    with torch.device("meta"):  # nanochat builds on meta and initialises in init_weights, as we do
        model = nanochat.GPT(cfg)
    model.to_empty(device="cpu")
    model.init_weights()
    return _peer_step(model, vocab, batch, seq_len, model)


def recompute_decode_fn(model: GPT, prompt: torch.Tensor, new_tokens: int) -> Callable[[], None]:
    """Greedy decoding without a cache: a full forward over the whole prefix for every token."""

    @torch.no_grad()
    def run() -> None:
        idx = prompt
        for _ in range(new_tokens):
            idx = torch.cat([idx, model(idx)[:, -1:].argmax(-1)], dim=1)

    return run


def decode_flops(model: GPT, feedback: bool, context: float, batch: int = 1) -> float:
    """Forward FLOPs of one decoding step of ``batch`` sequences: per generated token, two per weight it
    multiplies plus attention over ``context`` keys.

    The mechanism's weights count only when the token reads memory (``feedback``).
    """
    groups = model.num_params_by_group()
    weights = groups["blocks"] + (groups["mechanism"] if feedback else 0) + model.readout_weight.numel()
    c = model.config
    return batch * (2.0 * weights + 4.0 * c.n_layer * c.n_embd * context)


def run_benchmarks(quick: bool = False, threads: int = 2, nanogpt: str | os.PathLike | None = None,
                   nanochat: str | os.PathLike | None = None) -> pd.DataFrame:
    """Every row; ``quick`` shrinks sizes and rounds so the test suite can smoke-test it.

    ``nanogpt``: path of nanoGPT's ``model.py`` for the side-by-side rows (default: the environment
    variable ``WORKBENCH_NANOGPT``; unset: those rows are left out). ``nanochat``: nanochat's repository
    (default ``WORKBENCH_NANOCHAT``) for rows timing its GPT's step beside ours, the peer our block follows.
    """
    torch.set_num_threads(threads)
    nanogpt = nanogpt or os.environ.get("WORKBENCH_NANOGPT") or None
    nanochat = nanochat or os.environ.get("WORKBENCH_NANOCHAT") or None
    rounds = 1 if quick else 7
    decode_rounds = 1 if quick else 11  # a decode row is short and noisier: more rounds
    batch, T, vocab = (2, 16, 64) if quick else (16, 128, 256)
    new = 8 if quick else 128
    fused_passes = 10 if quick else 1000
    probe_n = 48 if quick else 1600
    base = "train step 4x128 baseline"

    small, wide = _model("none", 4, 128, vocab, T), _model("none", 6, 256, vocab, T)
    lrt = _model("lrt", 4, 128, vocab, T, lrt_gamma_init=0.1)
    fbt = _model("fbt", 4, 128, vocab, T)

    def train(name: str, model: GPT, reference: str | None = None, target: float | None = None,
              schedule: schedules.Schedule | None = None, compile: bool = False) -> Row:
        schedule = schedule or schedules.Single()
        flops = schedule.flops(model, batch, T)
        return Row(name, train_step_fn(model, batch, T, schedule, compile), reference, target, flops=flops)

    S2, S4 = schedules.Interleaved(2), schedules.Interleaved(4)
    P2, P3 = schedules.Multipass(2), schedules.Multipass(3)

    matmul = f"float32 matmul {MATMUL_SIZE}^3 (the peak for util)"
    train_rows = [
        Row(matmul, matmul_fn(), unit="matmul", flops=2.0 * MATMUL_SIZE ** 3),
        train(base, small),
        train("train step 6x256 baseline", wide, base),
        train("train step 4x128 LRT interleaved S=2", lrt, base, 2.2, S2),
        train("train step 4x128 LRT interleaved S=4", lrt, base, None, S4),
        train("train step 4x128 FBT 2-pass", fbt, base, 2.1, P2),
        train("train step 4x128 FBT 3-pass", fbt, base, 3.1, P3),
    ]
    ablations = {"no softcap": dict(logit_softcap=0.0), "no QK-norm": dict(qk_norm=False), "no RoPE": dict(rope=False),
                 "none of the three": dict(logit_softcap=0.0, qk_norm=False, rope=False)}
    train_rows += [train(f"{base}, {label}", _model("none", 4, 128, vocab, T, **kw), base)
                   for label, kw in ablations.items()]
    # what the fast path (workbench.fast) buys: the same steps on the plain path, divided by the fast ones
    train_rows += [Row(f"{row.name}, plain path", plain_path(row.fn), row.name, flops=row.flops)
                   for row in train_rows[1:] if row.name in (base, "train step 4x128 LRT interleaved S=2",
                                                              "train step 4x128 FBT 3-pass")]
    if not quick:  # the same steps as TrainConfig(compile=True) runs them (the warm-up compiles, ~1 min each)
        train_rows += [
            train(f"{base} compiled", small, base, compile=True),
            train("train step 4x128 LRT interleaved S=2 compiled", lrt, f"{base} compiled", 2.2, S2, True),
            train("train step 4x128 LRT interleaved S=4 compiled", lrt, f"{base} compiled", None, S4, True),
            train("train step 4x128 FBT 2-pass compiled", fbt, f"{base} compiled", 2.1, P2, True),
            train("train step 4x128 FBT 3-pass compiled", fbt, f"{base} compiled", 3.1, P3, True),
        ]
    if nanogpt is not None:  # nanoGPT's step beside ours, timed in the same rounds
        module = load_nanogpt(nanogpt)
        flops = {r.name: r.flops for r in train_rows}
        pairs = [("4x128", 4, 128, base), ("6x256", 6, 256, "train step 6x256 baseline")]
        for shape, n_layer, n_embd, ours in pairs:
            nano = f"train step {shape} nanoGPT"
            train_rows += [Row(nano, nanogpt_step_fn(module, n_layer, n_embd, vocab, batch, T), flops=flops[ours]),
                           Row(f"{ours} / nanoGPT", None, nano, 1.0, flops=flops[ours], timing_of=ours)]
        bare = f"{base}, none of the three"
        train_rows.append(Row(f"{bare} / nanoGPT", None, "train step 4x128 nanoGPT", flops=flops[base], timing_of=bare))
        if not quick:
            train_rows.append(Row(f"{base} compiled / nanoGPT", None, "train step 4x128 nanoGPT", 1.0,
                                  flops=flops[base], timing_of=f"{base} compiled"))
    if nanochat is not None:  # nanochat's step beside ours, in the same rounds (measure alternates the rows)
        module = load_nanochat(nanochat)
        flops = {r.name: r.flops for r in train_rows}
        for shape, n_layer, n_embd, ours in [("4x128", 4, 128, base), ("6x256", 6, 256, "train step 6x256 baseline")]:
            peer = f"train step {shape} nanochat"
            train_rows += [Row(peer, nanochat_step_fn(module, n_layer, n_embd, vocab, batch, T), flops=flops[ours]),
                           Row(f"{ours} / nanochat", None, peer, 1.0, flops=flops[ours], timing_of=ours)]
    times = measure(train_rows, rounds)

    one, many = torch.randint(0, vocab, (1, 1)), torch.randint(0, vocab, (batch, 1))
    idx = torch.randint(0, vocab, (batch, T))

    def decode(name: str, model: GPT, regime: str, prompt: torch.Tensor, reference: str | None = None,
               target: float | None = None, compile: bool = False) -> Row:
        flops = decode_flops(model, regime != "standard", (prompt.size(1) + new) / 2, prompt.size(0))
        return Row(name, lambda: generate(model, prompt, new, regime=regime, compile=compile), reference, target,
                   "token", new, flops=flops)

    def forward() -> None:
        with torch.no_grad():
            fbt(idx)

    def fused_prefill() -> None:
        with torch.no_grad():
            for _ in schedules.iterate_passes(fbt, idx, passes=fused_passes):
                pass

    # Decoding a batch of B sequences (one token each step); batch 1 shows the per-step overhead alone.
    # Each mechanism is timed eager and compiled (each token's step under torch.compile; the warm-up
    # compiles), at 4x128 and at 12x256, where the mechanism's share of the arithmetic is a third.
    inference_rows = [
        Row("decode 4x128 batch 1 recompute prefix", recompute_decode_fn(small, one, new), unit="token", per=new),
        decode("decode 4x128 batch 1 KV cache", small, "standard", one, "decode 4x128 batch 1 recompute prefix"),
        decode("decode 4x128 batch 1 LRT soft", lrt, "soft", one, "decode 4x128 batch 1 KV cache"),
        Row(f"decode 4x128 batch {batch} recompute prefix", recompute_decode_fn(small, many, new), unit="token",
            per=new),
    ]
    models = {"4x128": (small, lrt, fbt)}
    if not quick:
        models["12x256"] = (_model("none", 12, 256, vocab, T), _model("lrt", 12, 256, vocab, T, lrt_gamma_init=0.1),
                            _model("fbt", 12, 256, vocab, T))
    for shape, (plain_model, lrt_model, fbt_model) in models.items():
        for m in (plain_model, lrt_model, fbt_model):
            m.eval()
        for compile in (False,) if quick else (False, True):  # quick: no compiling (the tests cover it)
            dec = f"decode {shape} batch {batch}" + (" compiled" if compile else "")
            against_recompute = (shape, compile) == ("4x128", False)  # the cache's own target: <= 1/3
            inference_rows += [
                decode(f"{dec} KV cache", plain_model, "standard", many,
                       f"decode 4x128 batch {batch} recompute prefix" if against_recompute else None,
                       1 / 3 if against_recompute else None, compile),
                decode(f"{dec} LRT soft", lrt_model, "soft", many, f"{dec} KV cache", 1.05, compile),
                decode(f"{dec} FBT standard", fbt_model, "standard", many, compile=compile),
                decode(f"{dec} FBT soft", fbt_model, "soft", many, f"{dec} FBT standard", 1.02, compile),
            ]
    inference_rows += [
        Row("forward 4x128 FBT one pass", forward),
        Row(f"fused prefill per pass ({fused_passes} passes)", fused_prefill, "forward 4x128 FBT one pass", 1.1,
            unit="pass", per=fused_passes, rounds=1),
    ]
    times |= measure(inference_rows, decode_rounds)
    probe_rows = [Row(f"probe sweep {probe_n} examples x 4 conditions (4x128, completion_tracking)",
                      _probe_sweep_fn(probe_n), unit="sweep", rounds=1)]
    times |= measure(probe_rows, 1)
    return _table(train_rows + inference_rows + probe_rows, times, matmul)


SLOWER = 1.02  # a row of ``versions_side_by_side`` whose after / before exceeds this got slower (issue 32's bar)


def _rows_of(bench: ModuleType, quick: bool, threads: int) -> list[tuple[list, int]]:
    """The rows a version's ``run_benchmarks`` builds, in the groups and rounds it measures them, timing nothing
    (its ``measure`` swapped for a recorder for the call; the peers' rows left out: they are not ours)."""
    groups: list[tuple[list, int]] = []

    def record(rows: list, rounds: int):
        groups.append((rows, rounds))
        timed = [r.name for r in rows if r.timing_of is None]
        return bench.Timings({n: [1.0] for n in timed}, {n: [None] for n in timed})

    measure_of, peers = bench.measure, {k: os.environ.pop(k, None) for k in ("WORKBENCH_NANOGPT", "WORKBENCH_NANOCHAT")}
    bench.measure = record
    try:
        bench.run_benchmarks(quick=quick, threads=threads)
    finally:
        bench.measure = measure_of
        os.environ.update({k: v for k, v in peers.items() if v is not None})
    return groups


def versions_side_by_side(before: ModuleType, after: ModuleType, quick: bool = False, threads: int = 2,
                          skip: str | None = None, rounds: int | None = None, control: bool = False) -> pd.DataFrame:
    """Every timed row of two versions' ``make bench`` (``before`` and ``after``: their bench modules, e.g. an old
    revision's imported under another package name by ``tools/bench_versions.py``), measured in one process, each
    row's two versions alternating round by round (``measure``), so the machine's load hits both alike. One record
    per row both versions have: fastest ``before_ms`` / ``after_ms``, their ratio, and ``slower`` when it exceeds
    ``SLOWER``; a row only one version has is listed with the other's time missing. ``skip``: a regular expression;
    the rows whose names it matches are not timed (e.g. ``"compiled"``: a compiled row's warm-up compiles, ~1 min each).
    ``rounds``: every group timed this many rounds instead of its own count (a few flagged rows re-measured with many
    rounds, to tell a real change from the machine's spread).
    ``control``: also time a second, separately built copy of every ``after`` row in the same rounds (an A/A
    comparison): ``again/after`` is what the same code measures against itself here, ``best/before`` the faster
    of the two copies against ``before``, and ``beyond_spread`` marks a row where even that exceeds both ``SLOWER``
    and the A/A spread (on a shared machine the spread can exceed the 2 % bar)."""
    torch.set_num_threads(threads)
    records = []
    if rounds is not None:
        check_int("rounds", rounds, 1, 10_000)
    versions = [("before", before), ("after", after)] + ([("again", after)] if control else [])
    for groups in zip(*(_rows_of(version, quick, threads) for _, version in versions), strict=True):
        rows = {side: {r.name: r for r in group if r.timing_of is None and not (skip and re.search(skip, r.name))}
                for (side, _), (group, _) in zip(versions, groups, strict=True)}
        old, new = rows["before"], rows["after"]
        pairs = [name for name in new if name in old]
        timed = [Row(f"{side}: {name}", rows[side][name].fn, unit=new[name].unit, per=new[name].per,
                     rounds=None if rounds else new[name].rounds) for name in pairs for side in rows]
        timings = measure(timed, rounds or groups[0][1])
        for name in pairs:
            ms = {side: 1000 * min(timings.seconds[f"{side}: {name}"]) for side in rows}
            ratio = ms["after"] / ms["before"]
            record = {"benchmark": name, "per": new[name].unit, "before_ms": ms["before"], "after_ms": ms["after"],
                      "after/before": ratio, "slower": bool(ratio > SLOWER)}
            if control:
                spread = max(ms["again"] / ms["after"], ms["after"] / ms["again"])
                best = min(ms["after"], ms["again"]) / ms["before"]
                record |= {"again_ms": ms["again"], "again/after": ms["again"] / ms["after"], "best/before": best,
                           "beyond_spread": bool(best > SLOWER and best > spread)}
            records.append(record)
        records += [{"benchmark": name, "per": side_rows[name].unit, "only in": side}  # nothing to compare it with
                    for side, side_rows, other in (("before", old, new), ("after", new, old)) for name in side_rows
                    if name not in other]
    return pd.DataFrame.from_records(records)


def _probe_sweep_fn(n: int) -> Callable[[], object]:
    """The analysis issue's target (under 30 s for 1,600 examples): every depth x 4 prefill conditions."""
    from workbench.analysis import probe_layers
    from workbench.tasks import get

    task = get("completion_tracking")
    model = _model("fbt", 4, 128, task.vocab_size, task.seq_len).eval()
    return lambda: probe_layers(model, task, ("standard", "suffix1", "suffix2", "suffix4"), n=n,
                                random_baseline=False)


def _table(rows: list[Row], timings: Timings, peak: str) -> pd.DataFrame:
    """One record per row: fastest time, ratio to its reference, floor, util (FLOP/s over ``peak``'s),
    median page faults."""
    by_name = {r.name: r for r in rows}
    fastest = {r.name: min(timings.seconds[r.timing_of or r.name]) for r in rows}
    peak_flops = by_name[peak].flops / fastest[peak]
    records = []
    for r in rows:
        ref = by_name.get(r.reference) if r.reference else None
        ratio = fastest[r.name] / fastest[ref.name] if ref else None
        floor = r.flops / ref.flops if ref and r.flops and ref.flops else None
        util = r.flops / fastest[r.name] / peak_flops if r.flops else None
        faults = timings.faults[r.timing_of or r.name]
        faults = None if None in faults else statistics.median(faults)
        records.append({"benchmark": r.name, "ms": 1000 * fastest[r.name], "per": r.unit,
                        "reference": r.reference or "", "ratio": ratio, "floor": floor, "util": util,
                        "faults": faults, "target": r.target,
                        "ok": None if r.target is None or ratio is None else bool(ratio <= r.target)})
    return pd.DataFrame.from_records(records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and one repeat (a smoke test, not a measurement)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--json", action="store_true", help="print JSON records instead of a table")
    args = parser.parse_args(argv)
    check_int("threads", args.threads, 1, 1024)
    table = run_benchmarks(quick=args.quick, threads=args.threads)
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        with pd.option_context("display.width", 160, "display.float_format", "{:.3f}".format):
            print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
