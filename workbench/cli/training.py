"""``info``, ``train`` (a flag per ``TrainConfig`` field), ``tasks`` and ``reproduce``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from .. import schedules
from ..config import field_docs
from ..train_config import TrainConfig
from .options import check_out_dir, finite_positive, parse_key_values, pass_mix_option, positive_int


def _cmd_info(args: argparse.Namespace) -> int:
    from ..checkpoint import load_checkpoint, load_config, load_metrics
    from ..config import ModelConfig
    from ..mechanisms import MECHANISM_CLASSES
    from ..model import D20_SHAPE, mechanism_overhead
    from .runs import resolve_checkpoint

    if args.checkpoint is None and not args.d20:
        raise ValueError("info: give a CHECKPOINT directory, or --d20")
    report: dict = {}
    if args.checkpoint is not None:
        path = resolve_checkpoint(args.checkpoint)
        model = load_checkpoint(path)  # every file checked: info must not vouch for a broken one
        config, header = model.config, load_config(path)[1]
        report.update(checkpoint=str(path), package_version=header.get("package_version"), config=config.to_dict(),
                      params=model.num_params_by_group(), overhead=mechanism_overhead(config),
                      metrics=load_metrics(path))
    if args.d20 or report.get("config", {}).get("mechanism", "none") != "none":
        report["d20"] = [{"mechanism": mech, **kw, **mechanism_overhead(ModelConfig(**D20_SHAPE, mechanism=mech, **kw))}
                         for mech, cls in MECHANISM_CLASSES.items()  # each mechanism names the configs worth a row
                         for kw in cls.overhead_rows]
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


def _flag(name: str) -> str:
    return "--out" if name == "out_dir" else "--" + name.replace("_", "-")


# the training schedule's JSON form, key by key (``schedules.parse`` refuses a key the schedule lacks)
_SCHEDULE_FLAGS: list[tuple[str, str, Any, str]] = [(_flag(name), name, kind, text) for name, kind, text in (
    ("schedule", str, f"one of {schedules.SCHEDULES} (default: single)"),
    ("passes", int, "multipass, fixed_point: passes per batch"),
    ("subsets", int, "interleaved: strided subsets"),
    ("block", int, "blockwise: block length"),
    ("pass_mix", pass_mix_option, "multipass: pass-count mix, e.g. 1:0.75,2:0.22,3:0.03"),
    ("aux_weight", float, "multipass, fixed_point: weight of the extra passes' loss"),
)]
# (flag, TrainConfig field, type): help and default come from TrainConfig, so both live in one place
_FLAGS: list[tuple[str, str, Any]] = [(_flag(name), name, kind) for name, kind in (
    ("task", str), ("feedback_start", float), ("prefix_mixin", float), ("prefix_draw", str), ("steps", int),
    ("batch_size", int), ("grad_accum", int), ("optimizer", str), ("lr", float), ("matrix_lr", float),
    ("weight_decay", float), ("lr_schedule", str), ("warmup_steps", int), ("decay_frac", float),
    ("min_lr_frac", float), ("grad_clip", float), ("seed", int), ("eval_every", int), ("eval_size", int),
    ("eval_seed", int), ("log_every", int), ("checkpoint_every", int), ("out_dir", str), ("device", str),
)]
_MODEL_FLAGS = [(_flag(name), name, kind) for name, kind in (
    ("mechanism", str), ("n_layer", int), ("n_head", int), ("n_embd", int))]


def _metavar(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_").upper()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The train command's flags, one per ``TrainConfig`` field a user sets."""
    defaults, docs = TrainConfig(), field_docs(TrainConfig)
    for flag, name, kind, text in _SCHEDULE_FLAGS:
        parser.add_argument(flag, dest=name, type=kind, default=None, metavar=_metavar(flag), help=text)
    for flag, name, kind in _FLAGS:  # argparse formats help with %: a literal one is doubled
        text = docs[name].replace("``", "").replace("%", "%%")
        parser.add_argument(flag, dest=name, type=kind, default=None, metavar=_metavar(flag),
                            help=f"{text} (default: {getattr(defaults, name)})")
    for flag, name, kind in _MODEL_FLAGS:
        parser.add_argument(flag, dest=f"model_{name}", type=kind, default=None, metavar=_metavar(flag),
                            help=f"ModelConfig.{name}")
    parser.add_argument("--model-param", action="append", metavar="KEY=VALUE",
                        help="any other ModelConfig field (repeatable)")
    parser.add_argument("--task-param", action="append", metavar="KEY=VALUE",
                        help="task parameter (repeatable)")
    parser.add_argument("--budget-flops", dest="budget", type=finite_positive, metavar="FLOPS",
                        help="instead of --steps: the steps FLOPS buy (experiments.matched_steps)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="let a fresh run replace files in --out this package did not write")
    parser.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                        help="no progress bar")
    parser.add_argument("--compile", dest="compile", action="store_true", default=None,
                        help="run the schedules under torch.compile")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The ``TrainConfig`` the flags describe."""
    given = {name: getattr(args, name) for _, name, _ in _FLAGS if getattr(args, name) is not None}
    schedule = {name: getattr(args, name) for _, name, _, _ in _SCHEDULE_FLAGS if getattr(args, name) is not None}
    if schedule:
        given["schedule"] = {"schedule": "single", **schedule}
    model = parse_key_values(args.model_param, "--model-param")
    for flag, name, _ in _MODEL_FLAGS:
        value = getattr(args, f"model_{name}")
        if value is not None and model.setdefault(name, value) != value:  # set, unless --model-param set it
            raise ValueError(f"{flag} {value!r} contradicts --model-param {name}={model[name]!r}")
    for name in ("progress", "compile"):
        if getattr(args, name) is not None:
            given[name] = getattr(args, name)
    cfg = TrainConfig(**given, model=model, task_params=parse_key_values(args.task_param, "--task-param"),
                      resume=args.resume, overwrite=args.overwrite)
    if args.budget is None:
        return cfg
    from ..experiments.common import matched_steps, step_flops  # sized up front: a cap would cut the LR schedule

    steps, per_step = matched_steps(cfg, args.budget), step_flops(cfg)
    if "steps" in given or steps * per_step > args.budget:
        raise ValueError(f"--budget-flops {args.budget:g} is invalid: give no --steps, and at least {steps} steps of "
                         f"{per_step:.4g} FLOPs")
    return cfg.replace(steps=steps)


def _loss_figure(cfg: TrainConfig) -> Callable[[dict[str, Any]], None] | None:
    if cfg.out_dir is None:
        return None
    from ..plots import LossFigure
    from ..run_dir import FIGURE_FILE

    title = f"{cfg.task}: {cfg.model.get('mechanism', 'none')}, {cfg.schedule.label}"
    return LossFigure(Path(cfg.out_dir) / FIGURE_FILE, title=title)


def _cmd_train(args: argparse.Namespace) -> int:
    from ..train import NonFiniteLossError, train

    cfg = config_from_args(args)
    try:
        result = train(cfg, callback=_loss_figure(cfg))
    except NonFiniteLossError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if int(os.environ.get("RANK", "0")) == 0:
        m = result.metrics
        print(f"done ({m['stop_reason']}): {m['step']} steps, {m['tokens']} tokens, {m['flops']:.4g} FLOPs, "
              f"{m['seconds']:.1f} s" + (f"; run dir {cfg.out_dir}" if cfg.out_dir else "")
              + (f"; resumed from {m['resumed_from']} at step {m['resumed_at_step']}" if "resumed_from" in m else ""))
        for label, values in held_out_lines(cfg, result):
            print(f"  held out, {label}: " + ", ".join(f"{k} {v:.4f}" for k, v in values.items()))
    return 0


def held_out_lines(cfg: TrainConfig, result) -> list[tuple[str, dict[str, float]]]:
    """Held-out numbers under the training schedule and, with feedback, the exact recurrence."""
    from .. import tasks
    from ..evaluation import per_example_metrics, summarize
    from .runs import EXACT, metric_names

    task = tasks.get(cfg.task, **cfg.task_params)
    names = metric_names(task)
    m, value = result.metrics, cfg.schedule
    lines = [(f"{value.label} (the training schedule)", {k: m[f"val_{k}"] for k in names if f"val_{k}" in m})]
    if result.model.config.mechanism != "none" and value != EXACT:
        batch = task.sample(cfg.eval_size, seed=cfg.eval_seed, split="val")
        exact = summarize(per_example_metrics(result.model, batch, EXACT), getattr(task, "bytes_per_token", None))
        lines.append((f"{EXACT.label} (the exact recurrence, what a decoder runs)", {k: exact[k] for k in names}))
    return lines


def _cmd_tasks(args: argparse.Namespace) -> int:
    from ..tasks import describe

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
    from .. import experiments

    if args.list:
        for r in experiments.list_recipes().itertuples():
            print(f"== {r.recipe} ({r.kind}, {r.runs} runs)\n  claim: {r.claim}\n  setting: {r.setting}\n"
                  f"  chance: {r.chance}\n  gates: " + "".join(f"\n    - {g}" for g in r.gates.split("; ") if g)
                  + f"\n  rule: {r.rule}\n")
        return 0
    if args.name is None:
        raise ValueError("reproduce: give a recipe NAME or 'all'")
    if args.name != "all" and args.name not in experiments.RECIPES:
        raise ValueError(f"reproduce: unknown recipe {args.name!r}; one of {sorted(experiments.RECIPES)} or 'all'")
    for flag in ("out", "scratch"):
        if getattr(args, flag) is not None:
            check_out_dir(getattr(args, flag), f"--{flag}")
    names = list(experiments.RECIPES) if args.name == "all" else [args.name]
    for name in names:
        outcome = experiments.reproduce(name, root=args.out, scale=args.scale, force=args.force, scratch=args.scratch,
                                        jobs=args.jobs)
        print(f"{name}: {outcome.verdict} -- {outcome.number}")
    if args.name == "all" or args.results:
        experiments.write_results_md(args.out, args.results)
        readme = Path(args.out or experiments.checkpoints_root()).parent / "README.md"
        if readme.is_file() and experiments.FINDINGS_BEGIN in readme.read_text():
            experiments.write_readme_findings(readme, args.out)
    return 0


def add_parsers(sub) -> None:
    """The info, train, tasks and reproduce commands."""
    p = sub.add_parser("info", help="config, parameter counts and metrics of a checkpoint")
    p.add_argument("checkpoint", nargs="?", help="run or checkpoint directory")
    p.add_argument("--d20", action="store_true", help="also mechanism overheads at the nanochat d20 shape")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("train", help="train a model (any mechanism x schedule)",
                       description="The short-run trainer: one loop for every mechanism x schedule.")
    add_arguments(p)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("tasks", help="list the tasks with one decoded example each")
    p.add_argument("--json", action="store_true", help="print JSON records")
    p.set_defaults(func=_cmd_tasks)

    p = sub.add_parser("reproduce", help="run a paper-claim recipe (or all); write checkpoints + results")
    p.add_argument("name", nargs="?", help="recipe name, or 'all'")
    p.add_argument("--list", action="store_true", help="list the recipes and exit")
    p.add_argument("--scale", type=finite_positive, default=1.0, help="multiply steps and eval sizes (GPU: > 1)")
    p.add_argument("--force", action="store_true", help="retrain even when a run is up to date")
    p.add_argument("--out", default=None, help="models and results (default: $WORKBENCH_CHECKPOINTS or checkpoints/)")
    p.add_argument("--scratch", default=None, help="trainer run directories (default runs/ beside --out)")
    p.add_argument("--results", default=None, help="write RESULTS.md here (default: beside --out, only for 'all')")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads (default 1: the models are small)")
    p.add_argument("--jobs", type=positive_int, default=1, help="stale runs trained at once, one thread each")
    p.set_defaults(func=_cmd_reproduce)
