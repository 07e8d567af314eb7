"""``eval``, ``compare`` and ``generate``: a trained run read back on held-out data."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch

from .. import schedules
from .options import (
    SCHEDULE_FORMS,
    compare_schedule_option,
    device_option,
    finite_non_negative,
    non_negative_int,
    positive_int,
    schedule_option,
    task_params_option,
)
from .runs import (
    EXACT,
    HEADERS,
    Run,
    describe_task,
    encode_prompt,
    heldout_task,
    is_text,
    load_run,
    loss_unit,
    metric_names,
    tokenizer_of,
)

FLOPS_TOLERANCE = 0.01  # within 1 % of the reference's training FLOPs: matched compute


REGIME_WORDS = {"standard": "no feedback: the model as a plain transformer",
                "soft": "plain prompt, then each new token reads its predecessor's memory",
                "fused": "prompt refined by {p} fused pass{es}, then as soft"}


def schedule_label(value: schedules.Schedule) -> str:
    """A schedule's label, with the depth a pass mix runs at."""
    evaluated = getattr(value, "evaluated", None)
    return value.label if evaluated is None else f"{value.label}, run as {evaluated.label}"


def eval_schedules(run: Run, given: schedules.Schedule | None) -> list[tuple[schedules.Schedule, str]]:
    """(schedule, role): ``given`` or the training schedule, then the exact one (alone without feedback)."""
    first, role = (given, "given") if given is not None else (run.training_schedule(), "training")
    if not run.feedback or first is None:
        return [(EXACT, "exact")]
    if first == EXACT:
        return [(EXACT, f"{role}, exact")]
    return [(first, role), (EXACT, "exact")]


def cmd_eval(args: argparse.Namespace) -> int:
    from ..evaluation import per_example_metrics, summarize

    run = load_run(args.run, args.device)
    task = heldout_task(run, args.task_params, args.text)
    batch = task.sample(args.n, args.seed, args.split)
    names = metric_names(task)
    rows = []
    for value, role in eval_schedules(run, args.schedule):
        frame = per_example_metrics(run.model, batch, value, batch_size=64)
        summary = summarize(frame, getattr(task, "bytes_per_token", None))
        rows.append({"schedule": schedule_label(value), "role": role, "spec": value.to_dict(),
                     **{k: summary[k] for k in names}})
    counters = run.counters()
    trained = run.training_schedule()
    record = {"run": args.run, "checkpoint": str(run.checkpoint), "mechanism": run.model.config.mechanism,
              "task": task.name, "task_params": task.params, "split": args.split, "n": args.n, "seed": args.seed,
              "targets": int((batch.targets >= 0).sum()),
              "training": {**counters, "schedule": None if trained is None else schedule_label(trained)},
              "results": rows}
    if args.json:
        print(json.dumps(record, indent=2, default=str))
        return 0
    print(f"checkpoint  {run.checkpoint} ({run.describe})")
    print(f"trained     {_counters_text(counters)}" + ("" if trained is None else f", schedule {trained.label}"))
    print(f"held out    {describe_task(task, args.split, args.n, args.seed)}, {record['targets']:,} targets")
    if not run.feedback:
        print("            (no feedback mechanism: every schedule computes the same, shown once)")
    width = max(len(f"{r['schedule']} [{r['role']}]") for r in rows) + 2
    heads = [HEADERS[k] + (f" ({loss_unit(task)})" if k == "loss" else "") for k in names]
    print(f"\n{'schedule':<{width}}" + "".join(f"{h:>{len(h) + 3}}" for h in heads))
    for r in rows:
        print(f"{r['schedule'] + ' [' + r['role'] + ']':<{width}}"
              + "".join(f"{r[k]:>{len(h) + 3}.4f}" for k, h in zip(names, heads)))
    return 0


def _counters_text(counters: dict[str, Any]) -> str:
    if counters["step"] is None:
        return "steps and FLOPs not recorded"
    tokens = "" if counters.get("tokens") is None else f", {counters['tokens']:,} tokens"
    return f"{counters['step']:,} steps{tokens}, {counters['flops']:.4g} FLOPs"


def comparison_kind(counters: list[dict[str, Any]]) -> str:
    """Whether runs trained equal steps, equal FLOPs (within 1 %), both or neither."""
    if any(c["step"] is None or c["flops"] is None for c in counters):
        return "unknown (a run records no training steps or FLOPs)"
    steps = all(c["step"] == counters[0]["step"] for c in counters)
    reference = counters[0]["flops"]
    flops = all(abs(c["flops"] - reference) <= FLOPS_TOLERANCE * reference for c in counters)
    if steps and flops:
        return "equal steps and equal FLOPs within 1 %"
    if steps:
        ratio = max(c["flops"] for c in counters) / min(c["flops"] for c in counters)
        return f"equal steps (training FLOPs differ, up to {ratio:.2f}x)"
    if flops:
        return "equal FLOPs within 1 %"
    return "neither equal steps nor equal FLOPs within 1 %"


def cmd_compare(args: argparse.Namespace) -> int:
    from ..evaluation import hierarchical_difference, per_example_metrics, summarize

    if len(args.runs) < 2:
        raise ValueError(f"RUN {args.runs!r} is invalid: compare needs at least two runs")
    runs = [load_run(path, args.device) for path in args.runs]
    run_tasks = [heldout_task(r, args.task_params, args.text) for r in runs]
    for r, t in zip(runs[1:], run_tasks[1:]):
        if (t.name, t.params) != (run_tasks[0].name, run_tasks[0].params):
            raise ValueError(f"RUN {r.path!r} was trained on {t.name} {t.params}, the reference on "
                             f"{run_tasks[0].name} {run_tasks[0].params}: pass --text or --task-params")
    task = run_tasks[0]
    batch = task.sample(args.n, args.seed, args.split)
    text = is_text(task)
    cols = ("loss", "bpb") if text else ("loss", "accuracy")
    rows, values = [], []
    for r in runs:
        value = (r.training_schedule() or EXACT) if args.schedule == "training" else (args.schedule or EXACT)
        frame = per_example_metrics(r.model, batch, value, batch_size=64)
        summary = summarize(frame, getattr(task, "bytes_per_token", None))
        # over the mean targets per example, so their mean is the pooled loss eval prints
        values.append(frame["nats"].to_numpy() / frame["targets"].mean())
        rows.append({"run": r.path, "checkpoint": str(r.checkpoint), "mechanism": r.model.config.mechanism,
                     "schedule": schedule_label(value), **r.counters(),
                     **{k: summary[k] for k in cols}})
    kind = comparison_kind(rows)
    diffs = []
    for r, v in zip(rows[1:], values[1:]):
        d = {"run": r["run"], "reference": rows[0]["run"],
             "loss": hierarchical_difference([values[0]], [v], seed=args.seed)}
        if text:
            d["bpb"] = {k: x / math.log(2) if k in ("mean", "low", "high") else x for k, x in d["loss"].items()}
        diffs.append(d)
    record = {"examples": {"task": task.name, "task_params": task.params, "split": args.split, "n": args.n,
                           "seed": args.seed}, "comparison": kind, "runs": rows, "differences": diffs}
    if args.json:
        print(json.dumps(record, indent=2, default=str))
        return 0
    print(f"held out    {describe_task(task, args.split, args.n, args.seed)}")
    print(f"comparison  {kind}\n")
    width = max(len(r["run"]) for r in rows) + 2
    sw = max(len(r["schedule"]) for r in rows) + 2
    print(f"{'run':<{width}}{'mechanism':>10}  {'schedule':<{sw}}{'steps':>8}{'tokens':>12}{'train FLOPs':>13}"
          + "".join(f"{HEADERS[k]:>11}" for k in cols))
    for r in rows:
        steps = "?" if r["step"] is None else f"{r['step']:,}"
        tokens = "?" if r["tokens"] is None else f"{r['tokens']:,}"
        flops = "?" if r["flops"] is None else f"{r['flops']:.4g}"
        print(f"{r['run']:<{width}}{r['mechanism']:>10}  {r['schedule']:<{sw}}{steps:>8}{tokens:>12}{flops:>13}"
              + "".join(f"{r[k]:>11.4f}" for k in cols))
    unit = loss_unit(task)
    print(f"\ndifference against {rows[0]['run']} (run - reference), paired over the {args.n} examples, "
          f"95 % bootstrap interval:")
    for d in diffs:
        parts = [f"loss {_interval(d['loss'])} {unit}"] + ([f"bits/byte {_interval(d['bpb'])}"] if text else [])
        print(f"  {d['run']:<{width}}" + "   ".join(parts))
    return 0


def _interval(d: dict[str, float]) -> str:
    return f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"


def cmd_generate(args: argparse.Namespace) -> int:
    from ..decode import generate

    flag = "--prompt" if args.prompt is not None else "--prompt-file"
    if args.prompt is not None:
        data = args.prompt.encode("utf-8")
    else:
        try:
            data = Path(args.prompt_file).read_bytes()
        except OSError as e:
            raise ValueError(f"--prompt-file {args.prompt_file!r} is invalid: {e.strerror or e}") from None
    run = load_run(args.run, args.device)
    tokenizer = tokenizer_of(run)
    ids = encode_prompt(tokenizer, data, flag)
    seq_len = run.model.config.seq_len
    room = seq_len - len(ids)
    new = args.max_new_tokens if args.max_new_tokens is not None else max(min(64, room), 0)
    if not args.past_seq_len and room < 1:
        raise ValueError(f"{flag} is invalid: {len(ids)} tokens, must be at most seq_len - 1 = {seq_len - 1} "
                         "(or pass --past-seq-len)")
    if not args.past_seq_len and new > room:
        raise ValueError(f"--max-new-tokens {new} is invalid: must be an int in [0, {room}] to stay within seq_len "
                         f"{seq_len} (or pass --past-seq-len)")
    prompt = torch.tensor([ids], dtype=torch.long, device=next(run.model.parameters()).device)
    regimes = list(schedules.REGIMES) if args.regime == "all" else [args.regime]
    out = {}
    for name in regimes:
        generator = torch.Generator(device=prompt.device).manual_seed(args.seed)
        tokens = generate(run.model, prompt, new, regime=name, prefill_passes=args.prefill_passes,
                          temperature=args.temperature, generator=generator)[0, len(ids):]
        out[name] = {"schedule": schedules.regime(name, args.prefill_passes).label, "tokens": tokens.tolist(),
                     "text": tokenizer.decode(tokens)}
    record = {"run": args.run, "checkpoint": str(run.checkpoint), "mechanism": run.model.config.mechanism,
              "prompt_tokens": ids, "max_new_tokens": new, "temperature": args.temperature, "seed": args.seed,
              "prefill_passes": args.prefill_passes, "regimes": out}
    if args.json:
        print(json.dumps(record, indent=2))
        return 0
    sampling = "greedy" if args.temperature == 0 else f"temperature {args.temperature:g}, seed {args.seed}"
    bos = " (with <bos>)" if getattr(tokenizer, "bos_id", None) is not None else ""
    print(f"checkpoint  {run.checkpoint} ({run.describe})")
    print(f"prompt      {data.decode('utf-8', errors='replace')!r}: {len(ids)} tokens{bos}; {new} new tokens, "
          f"{sampling}")
    for name, result in out.items():
        words = REGIME_WORDS[name].format(p=args.prefill_passes, es="es" * (args.prefill_passes != 1))
        same = "; no feedback mechanism, so the same as standard" if not run.feedback and name != "standard" else ""
        print(f"\n--- {name} ({words}{same})\n{result['text']}")
    return 0


def _heldout_arguments(p: argparse.ArgumentParser, schedule_help: str, compare: bool = False) -> None:
    data = p.add_mutually_exclusive_group()
    data.add_argument("--task-params", type=task_params_option, default=None, metavar="JSON",
                      help="override the run's task parameters")
    data.add_argument("--text", default=None, metavar="PATH",
                      help="a text file for a byte-level model (val: its last val_fraction)")
    p.add_argument("--n", type=positive_int, default=256, help="held-out examples (default 256)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="example seed (default 0)")
    p.add_argument("--split", choices=("train", "val"), default="val", help="default val")
    p.add_argument("--schedule", type=compare_schedule_option if compare else schedule_option, default=None,
                   metavar="S", help=f"{schedule_help}: {SCHEDULE_FORMS}")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--device", type=device_option, default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")


def add_parsers(sub) -> None:
    """The eval, compare and generate commands."""
    p = sub.add_parser("eval", help="held-out loss under the training schedule and the exact recurrence")
    p.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="run or checkpoint directory")
    _heldout_arguments(p, "schedule besides the exact one (default: the training one)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("compare", help="paired held-out loss differences between runs")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run or checkpoint directories; the first is the reference")
    _heldout_arguments(p, "every run's schedule (default sequential; 'training': each run's own)", compare=True)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("generate", help="continue a prompt under the decoding regimes")
    p.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="run or checkpoint directory")
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", default=None, metavar="TEXT", help="the prompt")
    prompt.add_argument("--prompt-file", default=None, metavar="PATH", help="a file holding the prompt")
    p.add_argument("--regime", choices=("standard", "soft", "fused", "all"), default="all", help="default all")
    p.add_argument("--prefill-passes", type=positive_int, default=1, help="fused: prefill passes (default 1)")
    p.add_argument("--max-new-tokens", type=non_negative_int, default=None,
                   help="tokens to generate (default: up to 64 within seq_len)")
    p.add_argument("--past-seq-len", action="store_true", help="allow decoding past seq_len (never trained there)")
    p.add_argument("--temperature", type=finite_non_negative, default=0.0, help="0 (default): greedy")
    p.add_argument("--seed", type=non_negative_int, default=0, help="sampling seed (temperature > 0)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--device", type=device_option, default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")
    p.set_defaults(func=cmd_generate)
