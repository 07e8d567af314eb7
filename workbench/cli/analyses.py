"""``probe``, ``contraction`` and ``traces``: analyses of a checkpoint, each written as a CSV and a PNG."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ..files import write_csv
from .options import check_out_dir, non_negative_int, positive_int
from .runs import checkpoint_task, load_run


def _write(table: pd.DataFrame, figure, out: str, stem: str) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    write_csv(Path(out) / f"{stem}.csv", table)
    figure.savefig(Path(out) / f"{stem}.png", dpi=110, bbox_inches="tight")
    print(f"wrote {Path(out) / stem}.csv and .png")


def _opened(args: argparse.Namespace):
    check_out_dir(args.out)
    run = load_run(args.checkpoint, what="CHECKPOINT")
    return run.model, checkpoint_task(run, args.task, args.task_param)


def _cmd_probe(args: argparse.Namespace) -> int:
    model, task = _opened(args)
    from ..analysis import probe_layers
    from ..plots import layer0_comparison
    from .runs import probe_source

    source, n, labels = probe_source(task, args.n, args.labels, args.seed, args.out)
    table = probe_layers(model, source, conditions=args.conditions, n=n, seed=args.seed,
                         labels=labels, random_baseline=not args.no_random_baseline)
    table["task"] = task.name
    print(table[table["layer"] == 0].to_string(index=False))
    _write(table, layer0_comparison(table), args.out, "probes")
    return 0


def _cmd_contraction(args: argparse.Namespace) -> int:
    model, task = _opened(args)
    from ..analysis import pass_dynamics
    from ..plots import contraction_curves

    batch = task.sample(args.n, args.seed, "val")
    table = pass_dynamics(model, batch.tokens, passes=args.passes, targets=batch.targets, progress=True)
    rows = sorted({min(i, len(table) - 1) for i in (0, 1, batch.tokens.size(1), len(table) - 1)})
    print(table.iloc[rows].to_string(index=False))
    _write(table, contraction_curves(table), args.out, "pass_dynamics")
    return 0


def _cmd_traces(args: argparse.Namespace) -> int:
    model, task = _opened(args)
    from ..analysis import summarize_traces, trace_lengths
    from ..plots import trace_lengths as plot_traces

    table = trace_lengths(model, task, regimes=args.regimes, n=args.n, seed=args.seed,
                          max_new_tokens=args.max_new_tokens, prefill_passes=args.prefill_passes)
    print(summarize_traces(table).to_string(index=False))
    _write(table, plot_traces(table), args.out, "traces")
    return 0


def _analysis_parser(sub, name: str, help_text: str, func, n: int | None, n_text: str | None = None
                     ) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text)
    p.add_argument("checkpoint", help="run or checkpoint directory")
    p.add_argument("--task", default=None, help="task name (default: the checkpoint's)")
    p.add_argument("--task-param", action="append", metavar="KEY=VALUE", help="task parameter (repeatable)")
    p.add_argument("--n", type=positive_int, default=n, help=f"held-out examples (default {n_text or n})")
    p.add_argument("--seed", type=non_negative_int, default=0, help="example seed")
    p.add_argument("--out", default=".", help="directory for the CSV and PNG (default: here)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")
    p.set_defaults(func=func)
    return p


def add_parsers(sub) -> None:
    """The probe, contraction and traces commands."""
    p = _analysis_parser(sub, "probe", "linear probes at every depth under prefill conditions", _cmd_probe, None,
                         "400, or the number of --labels")
    p.add_argument("--conditions", nargs="+", default=["standard", "suffix1", "suffix2", "suffix4", "sequential"],
                   help="prefill conditions: standard, suffixK, sequential, multipassK")
    p.add_argument("--no-random-baseline", action="store_true", help="skip the randomly initialised twin")
    p.add_argument("--labels", default=None, metavar="PATH",
                   help="integer labels, one per line (text: of OUT/probe_examples.csv)")
    p = _analysis_parser(sub, "contraction", "iterate the fused pass map: residual, fixed-point distance, loss",
                         _cmd_contraction, 8)
    p.add_argument("--passes", type=positive_int, default=1000, help="passes (default 1000)")
    p = _analysis_parser(sub, "traces", "trace lengths and accuracy per decoding regime", _cmd_traces, 64)
    p.add_argument("--regimes", nargs="+", default=["standard", "soft", "fused"], help="decoding regimes")
    p.add_argument("--max-new-tokens", type=non_negative_int, default=48, help="tokens generated per question")
    p.add_argument("--prefill-passes", type=positive_int, default=2, help="fused prefill passes")
