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

from . import __version__
from .train import add_cli as add_train_cli


def _cmd_info(args: argparse.Namespace) -> int:
    from .checkpoint import load_config, load_metrics
    from .config import ModelConfig
    from .model import D20_SHAPE, build_model, mechanism_overhead

    if args.checkpoint is None and not args.d20:
        raise SystemExit("info: give a CHECKPOINT directory, or --d20 for the nanochat d20 overhead table")
    report: dict = {}
    has_mechanism = False
    if args.checkpoint is not None:
        config, header = load_config(args.checkpoint)
        model = build_model(config, device="meta")
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
        with pd.option_context("display.width", 200, "display.max_colwidth", 90):
            print(experiments.list_recipes().to_string(index=False))
        return 0
    if args.name is None:
        raise SystemExit("reproduce: give a recipe NAME or 'all' (see --list)")
    torch.set_num_threads(args.threads)
    names = list(experiments.RECIPES) if args.name == "all" else [args.name]
    for name in names:
        outcome = experiments.reproduce(name, root=args.out, scale=args.scale, force=args.force, scratch=args.scratch)
        print(f"{name}: {outcome.verdict} -- {outcome.number}")
    if args.name == "all" or args.results:
        experiments.write_results_md(args.out, args.results or "RESULTS.md")
    return 0


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

    p = sub.add_parser("reproduce", help="run a paper-claim recipe (or all) and write checkpoints + results")
    p.add_argument("name", nargs="?", help="recipe name, or 'all'")
    p.add_argument("--list", action="store_true", help="list the recipes and exit")
    p.add_argument("--scale", type=float, default=1.0, help="multiply steps and evaluation sizes (GPU: > 1)")
    p.add_argument("--force", action="store_true", help="retrain even when a run is up to date")
    p.add_argument("--out", default="checkpoints", help="where models and results go (default checkpoints/)")
    p.add_argument("--scratch", default="runs", help="trainer run directories (resumable; default runs/)")
    p.add_argument("--results", default=None, help="write RESULTS.md here (default: only for 'all')")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: these models are small; run two recipes side by side instead)")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("bench", help="benchmarks as ratios measured in one run")
    p.add_argument("--quick", action="store_true", help="tiny sizes and one repeat (a smoke test, not a measurement)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
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
