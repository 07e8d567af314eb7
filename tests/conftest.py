"""Shared test setup: few threads (the machine is shared), float64 models with every weight perturbed, and the
tiers' markers.

The tests mirror the package in tiers, each a folder: ``unit/<area>`` (one area of the package each),
``invariants`` (exactness in float64), ``specimens`` (the shipped checkpoints' gates, re-checked),
``e2e`` (CLI, DDP, resume, ``make lab``, the notebooks' hygiene, the browser). A test is marked with its
tier's folder (``specimens``, ``e2e``; ``notebooks`` for the nbval cells) and, by cost, ``slow``,
``compiles`` (torch.compile) or ``subprocess`` (starts other processes), so ``-m`` can pick any slice:
``make test-fast`` runs unit and invariants without the costly marks.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")  # headless figures in every test, before matplotlib loads

import pytest
import torch

import workbench as wb

torch.set_num_threads(int(os.environ.get("WORKBENCH_TEST_THREADS", "1")))


def perturbed_model(config: wb.ModelConfig, seed: int = 0, scale: float = 0.3) -> wb.GPT:
    """A float64 model whose every parameter is moved off its init (zero inits would hide bugs)."""
    torch.manual_seed(seed)
    model = wb.build_model(config, dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model.eval()


def token_batch(cfg: wb.ModelConfig, batch: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    """(batch, length) random token ids of ``cfg``'s vocabulary, the same for a seed."""
    return torch.randint(0, cfg.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


def small_config(mechanism: str = "none", **overrides) -> wb.ModelConfig:
    base = dict(vocab_size=23, n_layer=3, n_head=4, n_embd=32, seq_len=16, mechanism=mechanism,
                tie_embeddings=mechanism == "fbt")
    base.update(overrides)
    return wb.ModelConfig(**base)


MECHANISM_VARIANTS = {
    "none": {},
    "lrt_shared_top": dict(lrt_source_layer=-1),
    "lrt_per_layer_mid": dict(lrt_source_layer=1, lrt_projection="per_layer"),
    "lrt_kv_only": dict(lrt_inject=("kv",), lrt_source_layer=0),
    "lrt_residual_only_gqa": dict(lrt_inject=("residual",), n_kv_head=2),
    "fbt": {},
    # the block's ablations (no RoPE, no QK-norm) keep every invariant too
    "none_ablated": dict(rope=False, qk_norm=False),
    "lrt_nope": dict(rope=False, lrt_source_layer=1),
    "fbt_no_qk_norm": dict(qk_norm=False),
    # the memory sources of the LRT ablation: two positions back, a pooled average, none (gates and scales only)
    "lrt_older": dict(lrt_memory="older"),
    "lrt_pooled_mid": dict(lrt_memory="pooled", lrt_source_layer=1),
    "lrt_gates_only": dict(lrt_memory="none"),
}


def variant_config(name: str, **overrides) -> wb.ModelConfig:
    mechanism = name.split("_")[0]
    return small_config(mechanism, **{**MECHANISM_VARIANTS[name], **overrides})


@pytest.fixture(params=sorted(MECHANISM_VARIANTS))
def variant(request) -> str:
    return request.param


TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TIER_MARKS = {"specimens": "specimens", "e2e": "e2e"}


# the files that hold a worker longest (minutes each on one core, from make test's --durations), longest first:
# with --dist loadfile --no-loadscope-reorder (the Makefile's), pytest-xdist hands files to idle workers in
# collection order, so these start first, the notebooks under nbval (20-60 s each) next, and the short files fill
# the end, where the worker that finishes first waits for the other (xdist's default reorders files by their number
# of tests, which sent the two browser halves, a handful of tests each, to the very end)
LONGEST_FIRST = ("e2e/browser/test_notebooks_in_browser_05_on.py", "e2e/browser/test_notebooks_in_browser.py",
                 "specimens/test_specimens_layer0.py", "specimens/test_specimens_metrics.py",
                 "e2e/test_recipes_smoke.py", "e2e/test_recipes_smoke_fbt_text.py",
                 "e2e/test_recipes_smoke_fixed_point.py", "specimens/test_specimens_causal_use.py",
                 "e2e/test_recipes_smoke_lrt_ablation.py", "specimens/test_specimens_contraction.py",
                 "e2e/test_recipes_smoke_fbt.py", "specimens/test_specimens_fbt_text.py",
                 "unit/train/test_train.py", "unit/experiments/test_layer0_parallel.py",
                 "invariants/test_functional.py")


def pytest_collection_modifyitems(config, items) -> None:
    """Every test carries its tier's mark, read from its folder (the nbval cells of notebooks/ are ``notebooks``);
    the ``LONGEST_FIRST`` files are collected first, in that order, then the notebooks, the rest as they were."""
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if TESTS not in path.parents:
            item.add_marker("notebooks")
        elif path.relative_to(TESTS).parts[0] in TIER_MARKS:
            item.add_marker(TIER_MARKS[path.relative_to(TESTS).parts[0]])

    def rank(item) -> int:
        path = Path(str(item.fspath)).resolve()
        if TESTS not in path.parents:
            return len(LONGEST_FIRST)
        name = path.relative_to(TESTS).as_posix()
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST) + 1

    items.sort(key=rank)


def overlapping_ticks(ax) -> list[tuple[str, str]]:
    """Neighbouring x tick labels whose drawn boxes overlap (after a draw, in display pixels): a figure test's
    check that its labels can be read."""
    ax.figure.canvas.draw()
    boxes = [(t.get_text(), t.get_window_extent()) for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    return [(a, b) for (a, ba), (b, bb) in zip(boxes, boxes[1:]) if ba.x1 > bb.x0]
