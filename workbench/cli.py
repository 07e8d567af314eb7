"""Command line: ``python -m workbench {info, tasks, train, bench, ...} --help``.

Each command is a thin shell over a package function: it parses, calls, and writes or prints what
the function returned.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import pandas as pd

from ._version import __version__
from .train import add_cli as add_train_cli
from .train import parse_key_values


def _positive_int(text: str) -> int:
    """argparse type for counts such as ``--threads``: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be an int >= 1")
    return value


def _cmd_info(args: argparse.Namespace) -> int:
    from .checkpoint import load_checkpoint, load_config, load_metrics
    from .config import ModelConfig
    from .model import D20_SHAPE, mechanism_overhead

    if args.checkpoint is None and not args.d20:
        raise SystemExit("info: give a CHECKPOINT directory, or --d20 for the nanochat d20 overhead table")
    report: dict = {}
    has_mechanism = False
    if args.checkpoint is not None:
        model = load_checkpoint(args.checkpoint)  # every file checked: info must not vouch for a broken one
        config, header = model.config, load_config(args.checkpoint)[1]
        report["checkpoint"] = str(args.checkpoint)
        report["package_version"] = header.get("package_version")
        report["config"] = config.to_dict()
        report["params"] = model.num_params_by_group()
        report["overhead"] = mechanism_overhead(config)
        report["metrics"] = load_metrics(args.checkpoint)
        has_mechanism = config.mechanism != "none"
    if args.d20 or has_mechanism:
        rows = []
        for mech, kw in (("lrt", dict(lrt_projection="shared")), ("lrt", dict(lrt_projection="per_layer")),
                         ("fbt", dict(tie_embeddings=True))):
            cfg = ModelConfig(**D20_SHAPE, mechanism=mech, **kw)
            rows.append({"mechanism": mech, **kw, **mechanism_overhead(cfg)})
        report["d20"] = rows
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    for key, value in report.items():
        if key == "d20":
            print("\nOverhead at the nanochat d20 shape (20 layers, 1280 wide, 10 heads, vocab 65,536):")
            print(pd.DataFrame(value).to_string(index=False))
        elif isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"  {k:28s} {v}")
        else:
            print(f"{key}: {value}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_benchmarks

    table = run_benchmarks(quick=args.quick, threads=args.threads)
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        with pd.option_context("display.width", 160, "display.float_format", "{:.3f}".format):
            print(table.to_string(index=False))
    return 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    from .tasks import describe

    table = describe()
    if args.json:
        print(table.to_json(orient="records", indent=2))
        return 0
    for row in table.to_dict(orient="records"):
        print(f"== {row['name']}  (vocab {row['vocab_size']}, up to {row['seq_len']} tokens, params {row['params']})")
        print(row["example"].rstrip("\n"))
        print()
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    import torch

    from . import experiments

    if args.list:
        for r in experiments.list_recipes().itertuples():
            print(f"== {r.recipe} ({r.kind}, {r.runs} runs)\n  claim: {r.claim}\n  setting: {r.setting}\n"
                  f"  chance: {r.chance}\n  gates: " + "".join(f"\n    - {g}" for g in r.gates.split("; ") if g)
                  + f"\n  rule: {r.rule}\n")
        return 0
    if args.name is None:
        raise SystemExit("reproduce: give a recipe NAME or 'all' (see --list)")
    torch.set_num_threads(args.threads)
    names = list(experiments.RECIPES) if args.name == "all" else [args.name]
    for name in names:
        outcome = experiments.reproduce(name, root=args.out, scale=args.scale, force=args.force, scratch=args.scratch)
        print(f"{name}: {outcome.verdict} -- {outcome.number}")
    if args.name == "all" or args.results:
        experiments.write_results_md(args.out, args.results)
    return 0


def _checkpoint_task(path: str, name: str | None, params: list[str] | None):
    """The task a checkpoint was trained on (recorded by the trainer or a recipe), unless named."""
    from . import tasks
    from .checkpoint import load_config, load_metrics

    given = parse_key_values(params, "--task-param")
    if name is not None:
        return tasks.get(name, **given)
    _, header = load_config(path)
    recorded = header.get("train_config") or load_metrics(path).get("train_config") or {}
    task = header.get("task") or recorded.get("task")
    if task is None:
        raise ValueError(f"{path} records no task: pass --task NAME")
    return tasks.get(task, **{**(header.get("task_params") or recorded.get("task_params") or {}), **given})


def _write(table: pd.DataFrame, figure, out: str, stem: str) -> None:
    from pathlib import Path

    Path(out).mkdir(parents=True, exist_ok=True)
    table.to_csv(Path(out) / f"{stem}.csv", index=False)
    figure.savefig(Path(out) / f"{stem}.png", dpi=110, bbox_inches="tight")
    print(f"wrote {Path(out) / stem}.csv and .png")


def _cmd_probe(args: argparse.Namespace) -> int:
    import torch

    from .analysis import probe_layers
    from .checkpoint import load_checkpoint
    from .plots import layer0_comparison

    torch.set_num_threads(args.threads)
    task = _checkpoint_task(args.checkpoint, args.task, args.task_param)
    table = probe_layers(load_checkpoint(args.checkpoint), task, conditions=args.conditions, n=args.n,
                         seed=args.seed, random_baseline=not args.no_random_baseline)
    print(table[table["layer"] == 0].to_string(index=False))
    _write(table, layer0_comparison(table), args.out, "probes")
    return 0


def _cmd_contraction(args: argparse.Namespace) -> int:
    import torch

    from .analysis import pass_dynamics
    from .checkpoint import load_checkpoint
    from .plots import contraction_curves

    torch.set_num_threads(args.threads)
    batch = _checkpoint_task(args.checkpoint, args.task, args.task_param).sample(args.n, args.seed, "val")
    table = pass_dynamics(load_checkpoint(args.checkpoint), batch.tokens, passes=args.passes,
                          targets=batch.targets, progress=True)
    print(table.iloc[[0, 1, min(len(table) - 1, batch.tokens.size(1)), len(table) - 1]].to_string(index=False))
    _write(table, contraction_curves(table), args.out, "pass_dynamics")
    return 0


def _cmd_traces(args: argparse.Namespace) -> int:
    import torch

    from .analysis import summarize_traces, trace_lengths
    from .checkpoint import load_checkpoint
    from .plots import trace_lengths as plot_traces

    torch.set_num_threads(args.threads)
    task = _checkpoint_task(args.checkpoint, args.task, args.task_param)
    table = trace_lengths(load_checkpoint(args.checkpoint), task, regimes=args.regimes, n=args.n, seed=args.seed,
                          max_new_tokens=args.max_new_tokens, prefill_passes=args.prefill_passes)
    print(summarize_traces(table).to_string(index=False))
    _write(table, plot_traces(table), args.out, "traces")
    return 0


def _analysis_parser(sub, name: str, help_text: str, func, n: int) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text)
    p.add_argument("checkpoint", help="checkpoint directory (its recorded task is used unless --task is given)")
    p.add_argument("--task", default=None, help="task name (default: the one the checkpoint was trained on)")
    p.add_argument("--task-param", action="append", metavar="KEY=VALUE", help="task parameter (repeatable)")
    p.add_argument("--n", type=int, default=n, help=f"held-out examples (default {n})")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out examples")
    p.add_argument("--out", default=".", help="directory for the CSV and PNG (default: here)")
    p.add_argument("--threads", type=_positive_int, default=1, help="torch threads (default 1)")
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="config, parameter counts and metrics of a checkpoint")
    p.add_argument("checkpoint", nargs="?", help="checkpoint directory")
    p.add_argument("--d20", action="store_true", help="also print mechanism overheads at the nanochat d20 shape")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_info)

    add_train_cli(sub)

    p = sub.add_parser("tasks", help="list the tasks with one decoded example each")
    p.add_argument("--json", action="store_true", help="print JSON records")
    p.set_defaults(func=_cmd_tasks)

    p = _analysis_parser(sub, "probe", "linear probes at every depth under prefill conditions", _cmd_probe, 400)
    p.add_argument("--conditions", nargs="+", default=["standard", "suffix1", "suffix2", "suffix4", "sequential"],
                   help="prefill conditions: standard, suffixK, sequential, multipassK")
    p.add_argument("--no-random-baseline", action="store_true", help="skip the randomly initialised twin")
    p = _analysis_parser(sub, "contraction", "iterate the fused pass map: residual, fixed-point distance, loss",
                         _cmd_contraction, 8)
    p.add_argument("--passes", type=int, default=1000, help="passes (default 1000)")
    p = _analysis_parser(sub, "traces", "reasoning-trace lengths and accuracy per decoding regime", _cmd_traces, 64)
    p.add_argument("--regimes", nargs="+", default=["standard", "soft", "fused"], help="decoding regimes")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens generated per question")
    p.add_argument("--prefill-passes", type=int, default=2, help="fused prefill passes (regime fused)")

    p = sub.add_parser("reproduce", help="run a paper-claim recipe (or all) and write checkpoints + results")
    p.add_argument("name", nargs="?", help="recipe name, or 'all'")
    p.add_argument("--list", action="store_true", help="list the recipes and exit")
    p.add_argument("--scale", type=float, default=1.0, help="multiply steps and evaluation sizes (GPU: > 1)")
    p.add_argument("--force", action="store_true", help="retrain even when a run is up to date")
    p.add_argument("--out", default=None, help="where models and results go (default: the checkpoint root, "
                   "$WORKBENCH_CHECKPOINTS or the repository's checkpoints/, where load_run and notebooks read)")
    p.add_argument("--scratch", default=None, help="trainer run directories (resumable; default runs/ beside --out)")
    p.add_argument("--results", default=None, help="write RESULTS.md here (default: beside --out, only for 'all')")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="torch threads (default 1: these models are small; run two recipes side by side instead)")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("bench", help="benchmarks as ratios measured in one run")
    p.add_argument("--quick", action="store_true", help="tiny sizes and one repeat (a smoke test, not a measurement)")
    p.add_argument("--threads", type=_positive_int, default=2, help="torch threads (default 2)")
    p.add_argument("--json", action="store_true", help="print JSON records instead of a table")
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:  # bad input (configs, checkpoints, parameters) gets one clear line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
