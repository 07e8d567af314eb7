"""A trained run read back from the command line: ``eval``, ``compare`` and ``generate``.

What a path names (a run directory, what ``train --out DIR`` writes, or the checkpoint inside it),
which held-out examples a run is read on (its own task's, or a text file's), and the numbers the
three commands print: held-out loss under a run's training schedule and under the exact recurrence
(``sequential``, what a decoder computes), paired differences between runs with a bootstrap
interval beside each run's training steps and FLOPs, and continuations under the decoding regimes.
The argument parsers are ``cli``'s; the metrics are ``evaluation``'s, the decoding ``decode``'s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import schedules

RUN_DIR = "a run directory (what `train --out DIR` writes: DIR/checkpoint inside)"
CHECKPOINT_FORM = "a checkpoint directory (config.json + model.safetensors)"
RUN_FORMS = f"{RUN_DIR} or {CHECKPOINT_FORM}"
SCHEDULE_FORMS = ("single, sequential, multipass:K, interleaved:S, blockwise:B, fixed_point:K, or a JSON schedule "
                  "such as '{\"schedule\": \"multipass\", \"passes\": 3}'")
EXACT = schedules.Sequential()  # the exact recurrence: what a decoder realises, the number a run is judged by
FLOPS_TOLERANCE = 0.01  # runs within 1 % of the reference's training FLOPs count as matched compute
REGIME_WORDS = {"standard": "no feedback: the model as a plain transformer",
                "soft": "plain prompt, then each new token reads its predecessor's memory",
                "fused": "prompt refined by {p} fused pass{es}, then as soft"}


# ---------------------------------------------------------------------------------------------- what a path names
def resolve_checkpoint(path: str, what: str = "CHECKPOINT") -> Path:
    """The checkpoint directory ``path`` names: itself, or the ``checkpoint/`` of a run directory."""
    from .checkpoint import CONFIG, is_checkpoint
    from .run_dir import CHECKPOINT_DIR
    from .run_dir import CONFIG_FILE as RUN_CONFIG

    p = Path(path)
    if is_checkpoint(p):
        return p
    if os.path.lexists(p / CHECKPOINT_DIR):  # a run directory: loading says what is wrong with its checkpoint
        return p / CHECKPOINT_DIR
    if p.is_dir() and (p / RUN_CONFIG).is_file():
        raise ValueError(f"{what} {path!r} is a run directory without a checkpoint yet (its training is still "
                         f"running, or stopped before its first save): give {RUN_FORMS}")
    if p.is_dir():
        raise ValueError(f"{what} {path!r} is invalid: it is neither {RUN_DIR} nor {CHECKPOINT_FORM}")
    if os.path.lexists(p):
        raise ValueError(f"{what} {path!r} is invalid: it is a file, not a directory; give {RUN_FORMS}")
    raise ValueError(f"{what} {path!r} is invalid: no such directory (missing file {p / CONFIG}); give {RUN_FORMS}")


def schedule_option(text: str) -> schedules.Schedule:
    """``--schedule``: a name, ``name:K`` (its one knob) or a JSON schedule (argparse type)."""
    try:
        if text.lstrip().startswith("{"):
            return schedules.parse(json.loads(text))
        name, sep, knob = text.partition(":")
        if not sep:
            return schedules.parse(name)
        if name not in schedules.KNOBS:
            raise ValueError(f"{name} has no knob")
        return schedules.parse(name, **{schedules.KNOBS[name]: int(knob)})
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be {SCHEDULE_FORMS} ({e})") from None


def device_option(text: str) -> str:
    """``--device``: auto, cpu, cuda or cuda:N (argparse type)."""
    index = text.removeprefix("cuda:")
    if text not in ("auto", "cpu", "cuda") and not (text.startswith("cuda:") and index.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be auto, cpu, cuda or cuda:N")
    return text


def finite_non_negative(text: str) -> float:
    """argparse type for ``--temperature``: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be a finite number >= 0")
    return value


def compare_schedule_option(text: str) -> schedules.Schedule | str:
    """``compare --schedule``: a schedule (``schedule_option``), or ``training``: each run under its own."""
    return text if text == "training" else schedule_option(text)


def task_params_option(text: str) -> dict[str, Any]:
    """``--task-params``: a JSON object (argparse type)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be a JSON object, e.g. '{{\"seq_len\": 64}}'")
    return value


# ---------------------------------------------------------------------------------------------- a run
@dataclass
class Run:
    """A trained model and what its checkpoint (and run directory) recorded about its training."""

    path: str  # as the user gave it
    checkpoint: Path
    model: Any  # GPT
    header: dict[str, Any]
    metrics: dict[str, Any]
    train_config: dict[str, Any] = field(default_factory=dict)

    @property
    def feedback(self) -> bool:
        return self.model.config.mechanism != "none"

    @property
    def describe(self) -> str:
        c = self.model.config
        return (f"{c.mechanism}, {c.n_layer} layer{'s' * (c.n_layer != 1)} x {c.n_embd} wide, seq_len {c.seq_len}, "
                f"{self.model.num_params():,} parameters")

    def training_schedule(self) -> schedules.Schedule | None:
        """The schedule the run trained under (a pass mix evaluates at its stored depth), if recorded."""
        from .train_config import TrainConfig

        if not self.train_config:
            return None
        try:
            return TrainConfig.from_dict(self.train_config).schedule_value()
        except (TypeError, ValueError):
            return None

    def counters(self) -> dict[str, float | None]:
        """Training steps, tokens and FLOPs: the trainer's metrics, a recipe's ``train`` entry, or the last
        row of the run's history.csv."""
        for source in (self.metrics, self.metrics.get("train")):
            if isinstance(source, dict) and source.get("step") is not None and source.get("flops") is not None:
                return {k: source.get(k) for k in ("step", "tokens", "flops")}
        import pandas as pd

        for where in (self.checkpoint, self.checkpoint.parent):
            history = where / "history.csv"
            if history.is_file():
                rows = pd.read_csv(history)
                if len(rows) and {"step", "flops"} <= set(rows.columns):
                    last = rows.iloc[-1]
                    tokens = last.get("tokens")
                    return {"step": int(last["step"]), "tokens": int(tokens) if pd.notna(tokens) else None,
                            "flops": float(last["flops"])}
        return {"step": None, "tokens": None, "flops": None}

    def recorded_task(self) -> tuple[str | None, dict[str, Any]]:
        name = self.header.get("task") or self.train_config.get("task")
        params = self.header.get("task_params") or self.train_config.get("task_params") or {}
        return name, dict(params)


def load_run(path: str, device: str = "cpu", what: str = "RUN") -> Run:
    from .checkpoint import load_checkpoint, load_config, load_metrics

    checkpoint = resolve_checkpoint(path, what)
    model = load_checkpoint(checkpoint, device=_device(device))
    header = load_config(checkpoint)[1]
    metrics = load_metrics(checkpoint)
    train_config = header.get("train_config") or metrics.get("train_config") or {}
    return Run(path, checkpoint, model, header, metrics, train_config if isinstance(train_config, dict) else {})


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {name!r} is invalid: CUDA is not available here; use cpu or auto")
    return name


# ---------------------------------------------------------------------------------------------- held-out data
def heldout_task(run: Run, params: dict[str, Any] | None = None, text: str | None = None):
    """The task a run is read on: its recorded task (``params`` override its parameters), or the text file
    ``text`` (byte-level models; the run's own text parameters kept, seq_len the model's by default)."""
    from . import tasks

    name, recorded = run.recorded_task()
    if text is not None:
        if run.model.config.vocab_size != tasks.ByteTokenizer.vocab_size:
            raise ValueError(f"--text {text!r} is invalid for {run.path}: it needs a byte-level model (vocab "
                             f"{tasks.ByteTokenizer.vocab_size}), this one has vocab {run.model.config.vocab_size} "
                             f"(task {name}); use --task-params instead")
        if not Path(text).exists():
            raise ValueError(f"--text {text!r} is invalid: no such file or directory")
        kept = {k: v for k, v in recorded.items() if k in ("seq_len", "val_fraction")} if name == "text" else {}
        name, recorded = "text", {"seq_len": run.model.config.seq_len, **kept, "path": str(text)}
    if name is None:
        raise ValueError(f"{run.path} records no task: pass --text PATH (a byte-level model) to read it on a file")
    merged = {**recorded, **(params or {})}
    try:
        task = tasks.get(name, **merged)
    except (TypeError, ValueError) as e:
        hint = "--text PATH or " if name == "text" else ""
        raise ValueError(f"{run.path}: its task {name} {merged} cannot be rebuilt ({e}); pass {hint}--task-params "
                         f"JSON to change its parameters") from None
    if task.vocab_size != run.model.config.vocab_size:
        raise ValueError(f"{run.path}: task {name} has vocab {task.vocab_size}, the model "
                         f"{run.model.config.vocab_size}")
    return task


def is_text(task) -> bool:
    """Byte-level text: bits per byte mean something, answer accuracy does not."""
    return getattr(task, "bytes_per_token", None) is not None


def metric_names(task) -> tuple[str, ...]:
    return ("loss", "bpb", "accuracy") if is_text(task) else ("loss", "accuracy", "answer_accuracy")


HEADERS = {"loss": "loss", "bpb": "bits/byte", "accuracy": "accuracy", "answer_accuracy": "answer acc"}


def describe_task(task, split: str, n: int, seed: int) -> str:
    """``text(path=corpus.txt, seq_len=32): 256 examples of the val split (seed 0)``: parameters off their defaults."""
    from .tasks import param_defaults

    defaults = param_defaults(task.name)
    params = ", ".join(f"{k}={v}" for k, v in task.params.items() if k not in defaults or v != defaults[k])
    return f"{task.name}{f'({params})' if params else ''}: {n} examples of the {split} split (seed {seed})"


def _loss_unit(task) -> str:
    return "nats/byte" if is_text(task) else "nats/token"


def evaluate(run: Run, batch, schedule: schedules.Schedule):
    """Per-example metrics of ``run`` on ``batch`` under ``schedule`` (``evaluation.per_example_metrics``)."""
    from .evaluation import per_example_metrics

    return per_example_metrics(run.model, batch, schedule, batch_size=64)


def schedule_label(value: schedules.Schedule) -> str:
    """A schedule's label, with the depth a pass mix is evaluated at (its label gives only the mix)."""
    evaluated = getattr(value, "evaluated", None)
    return value.label if evaluated is None else f"{value.label}, run as {evaluated.label}"


def eval_schedules(run: Run, given: schedules.Schedule | None) -> list[tuple[schedules.Schedule, str]]:
    """(schedule, role) pairs: a feedback model under ``given`` or its training schedule, then the exact one;
    a model without feedback under the exact one only (every schedule computes the same there)."""
    if not run.feedback:
        return [(EXACT, "exact")]
    first = given if given is not None else run.training_schedule()
    role = "given" if given is not None else "training"
    if first is None:
        return [(EXACT, "exact")]
    if first == EXACT:
        return [(EXACT, f"{role}, exact")]
    return [(first, role), (EXACT, "exact")]


# ---------------------------------------------------------------------------------------------- eval
def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    from .evaluation import summarize

    torch.set_num_threads(args.threads)
    run = load_run(args.run, args.device)
    task = heldout_task(run, args.task_params, args.text)
    batch = task.sample(args.n, args.seed, args.split)
    names = metric_names(task)
    rows = []
    for value, role in eval_schedules(run, args.schedule):
        summary = summarize(evaluate(run, batch, value), getattr(task, "bytes_per_token", None))
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
    heads = [HEADERS[k] + (f" ({_loss_unit(task)})" if k == "loss" else "") for k in names]
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


# ---------------------------------------------------------------------------------------------- compare
def comparison_kind(counters: list[dict[str, Any]]) -> str:
    """Whether runs trained equal steps, equal FLOPs (within 1 % of the first's), both, or neither."""
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
    import torch

    from .evaluation import hierarchical_difference, summarize

    torch.set_num_threads(args.threads)
    if len(args.runs) < 2:
        raise ValueError(f"RUN {args.runs!r} is invalid: compare needs at least two runs (the first is the reference)")
    runs = [load_run(path, args.device) for path in args.runs]
    run_tasks = [heldout_task(r, args.task_params, args.text) for r in runs]
    for r, t in zip(runs[1:], run_tasks[1:]):
        if (t.name, t.params) != (run_tasks[0].name, run_tasks[0].params):
            raise ValueError(f"RUN {r.path!r} was trained on {t.name} {t.params}, the reference {runs[0].path!r} on "
                             f"{run_tasks[0].name} {run_tasks[0].params}: pass --text PATH or --task-params JSON to "
                             f"read them on the same examples")
    task = run_tasks[0]
    batch = task.sample(args.n, args.seed, args.split)
    text = is_text(task)
    rows, values = [], []
    for r in runs:
        value = (r.training_schedule() or EXACT) if args.schedule == "training" else (args.schedule or EXACT)
        frame = evaluate(r, batch, value)
        summary = summarize(frame, getattr(task, "bytes_per_token", None))
        # nats per example over the mean targets per example: the mean of these is the pooled loss eval prints
        values.append(frame["nats"].to_numpy() / frame["targets"].mean())
        rows.append({"run": r.path, "checkpoint": str(r.checkpoint), "mechanism": r.model.config.mechanism,
                     "schedule": schedule_label(value), **r.counters(),
                     **{k: summary[k] for k in (("loss", "bpb") if text else ("loss", "accuracy"))}})
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
    cols = ("loss", "bpb") if text else ("loss", "accuracy")
    print(f"{'run':<{width}}{'mechanism':>10}  {'schedule':<{sw}}{'steps':>8}{'tokens':>12}{'train FLOPs':>13}"
          + "".join(f"{HEADERS[k]:>11}" for k in cols))
    for r in rows:
        steps = "?" if r["step"] is None else f"{r['step']:,}"
        tokens = "?" if r["tokens"] is None else f"{r['tokens']:,}"
        flops = "?" if r["flops"] is None else f"{r['flops']:.4g}"
        print(f"{r['run']:<{width}}{r['mechanism']:>10}  {r['schedule']:<{sw}}{steps:>8}{tokens:>12}{flops:>13}"
              + "".join(f"{r[k]:>11.4f}" for k in cols))
    unit = _loss_unit(task)
    print(f"\ndifference against {rows[0]['run']} (run - reference), paired over the {args.n} examples, "
          f"95 % bootstrap interval:")
    for d in diffs:
        parts = [f"loss {_interval(d['loss'])} {unit}"] + ([f"bits/byte {_interval(d['bpb'])}"] if text else [])
        print(f"  {d['run']:<{width}}" + "   ".join(parts))
    return 0


def _interval(d: dict[str, float]) -> str:
    return f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"


# ---------------------------------------------------------------------------------------------- generate
def tokenizer_of(run: Run):
    """The run's tokenizer: its recorded task's (vocabularies are fixed per task family), else the byte or
    character tokenizer whose vocabulary the model has."""
    from . import tasks

    name, _ = run.recorded_task()
    if name in tasks.REGISTRY:
        tokenizer = tasks.get(name).tokenizer
        if tokenizer.vocab_size == run.model.config.vocab_size:
            return tokenizer
    for tokenizer in (tasks.ByteTokenizer(), tasks.CharTokenizer()):
        if tokenizer.vocab_size == run.model.config.vocab_size:
            return tokenizer
    raise ValueError(f"{run.path}: no tokenizer of this package has the model's vocab {run.model.config.vocab_size}")


def encode_prompt(tokenizer, prompt: bytes, flag: str = "--prompt") -> list[int]:
    """Prompt bytes as token ids: byte-level text opens a document (``<bos>``, as training windows do at a
    document's start) and takes any bytes; the character tokenizer takes printable ASCII and newlines."""
    bos = getattr(tokenizer, "bos_id", None)
    if bos is not None:
        return [bos, *tokenizer.encode_bytes(prompt).tolist()]
    try:
        ids = tokenizer.encode(prompt.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{flag} is invalid: byte {prompt[e.start:e.start + 1]!r} is not in the {tokenizer.name} "
                         f"vocabulary (printable ASCII and newline)") from None
    except ValueError as e:
        raise ValueError(f"{flag} is invalid: {e} (printable ASCII and newline)") from None
    if not ids:
        raise ValueError(f"{flag} is invalid: empty (this tokenizer has no document token to start from)")
    return ids


def cmd_generate(args: argparse.Namespace) -> int:
    import torch

    from .decode import generate

    torch.set_num_threads(args.threads)
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
        raise ValueError(f"{flag} is invalid: it is {len(ids)} tokens, the model's seq_len is {seq_len}: must be at "
                         f"most {seq_len - 1} tokens to leave room for one (or pass --past-seq-len)")
    if not args.past_seq_len and new > room:
        raise ValueError(f"--max-new-tokens {new} is invalid: the prompt's {len(ids)} tokens + {new} pass the model's "
                         f"seq_len {seq_len} (the longest context it trained on): must be an int in [0, {room}] "
                         f"(or pass --past-seq-len to decode past it)")
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


# ---------------------------------------------------------------------------------------------- the parsers
def _heldout_arguments(p: argparse.ArgumentParser, schedule_help: str, compare: bool = False, n: int = 256) -> None:
    """Which held-out examples eval and compare read, and where they run."""
    from .cli import non_negative_int, positive_int

    data = p.add_mutually_exclusive_group()
    data.add_argument("--task-params", type=task_params_option, default=None, metavar="JSON",
                      help="override parameters of the run's recorded task, e.g. '{\"seq_len\": 64}'")
    data.add_argument("--text", default=None, metavar="PATH", help="read a byte-level model on this text file instead "
                      "(its val split: the last 10 %% unless the run's text task set val_fraction)")
    p.add_argument("--n", type=positive_int, default=n, help=f"held-out examples (default {n})")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the held-out examples (default 0)")
    p.add_argument("--split", choices=("train", "val"), default="val", help="split of the examples (default val)")
    p.add_argument("--schedule", type=compare_schedule_option if compare else schedule_option, default=None,
                   metavar="S", help=f"{schedule_help}: single, sequential, multipass:K, interleaved:S, blockwise:B, "
                                     f"fixed_point:K or a JSON schedule")
    p.add_argument("--json", action="store_true", help="print a JSON record instead of a table")
    p.add_argument("--device", type=device_option, default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")


def add_parsers(sub) -> None:
    """The eval, compare and generate commands of ``python -m workbench``."""
    from .cli import non_negative_int, positive_int

    p = sub.add_parser("eval", help="held-out loss of a run under its training schedule and the exact recurrence")
    p.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="run directory (train --out) or checkpoint directory")
    _heldout_arguments(p, "a feedback model's schedule besides the exact one (default: its training schedule)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("compare", help="paired differences of held-out loss between runs, with training steps and "
                                       "FLOPs")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run or checkpoint directories; the first is the reference")
    _heldout_arguments(p, "every run's schedule (default sequential, the exact recurrence; 'training': each "
                          "run's own training schedule)", compare=True)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("generate", help="continue a prompt under the decoding regimes")
    p.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="run directory (train --out) or checkpoint directory")
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", default=None, metavar="TEXT", help="the prompt")
    prompt.add_argument("--prompt-file", default=None, metavar="PATH", help="a file holding the prompt")
    p.add_argument("--regime", choices=("standard", "soft", "fused", "all"), default="all",
                   help="decoding regime (default all: the three)")
    p.add_argument("--prefill-passes", type=positive_int, default=1, help="fused: prefill passes (default 1)")
    p.add_argument("--max-new-tokens", type=non_negative_int, default=None,
                   help="tokens to generate (default: up to 64, as many as the model's seq_len leaves)")
    p.add_argument("--past-seq-len", action="store_true",
                   help="allow decoding past the model's seq_len (RoPE positions are computed, so it runs; the model "
                        "never trained there)")
    p.add_argument("--temperature", type=finite_non_negative, default=0.0, help="0 (default): greedy")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the sampling (temperature > 0)")
    p.add_argument("--json", action="store_true", help="print a JSON record instead of text")
    p.add_argument("--device", type=device_option, default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")
    p.set_defaults(func=cmd_generate)


# ---------------------------------------------------------------------------------------------- probe labels
def read_labels(path: str) -> list[int]:
    """``--labels``: one integer per example, one per line (blank lines skipped)."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--labels {path!r} is invalid: {getattr(e, 'strerror', None) or e}") from None
    labels = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                labels.append(int(line))
            except ValueError:
                raise ValueError(f"--labels {path!r} is invalid: line {number} {line.strip()!r} is not an integer "
                                 f"(one integer label per example, one per line)") from None
    if not labels:
        raise ValueError(f"--labels {path!r} is invalid: it holds no labels (one integer per example, one per line)")
    return labels


def probe_source(task, n: int | None, labels_path: str | None, seed: int, out: str):
    """What ``probe`` reads: (task or batch, n for ``probe_layers``, labels or None).

    A task with labels of its own is probed as it is (``--labels`` overriding them). Text has none: its
    examples are ``text_windows``, written to ``OUT/probe_examples.csv`` (to label, or to check a labelling
    against), and ``--labels`` is required."""
    import pandas as pd

    labels = None if labels_path is None else read_labels(labels_path)
    n = n if n is not None else len(labels) if labels is not None else 400
    if labels is not None and len(labels) != n:
        raise ValueError(f"--labels {labels_path!r} holds {len(labels)} labels, --n is {n}: give one integer per "
                         f"example (or leave --n out: it defaults to the number of labels)")
    if not is_text(task):
        return task, n, labels
    batch = text_windows(task, n, seed)
    examples = Path(out) / "probe_examples.csv"
    Path(out).mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"example": range(n), "text": batch.texts, "label": labels}).to_csv(examples, index=False)
    if labels is None:
        raise ValueError(f"--labels is required: task {task.name} provides no labels; label the {n} examples written "
                         f"to {examples}, one integer per line, and pass --labels PATH")
    return batch, None, labels


def text_windows(task, n: int, seed: int, split: str = "val"):
    """``n`` non-overlapping ``seq_len``-token windows of a text split (drawn with ``seed``, kept in order), each
    its own cross-validation group, the label read at its last token: a text batch a probe can read."""
    import dataclasses

    import numpy as np
    import torch

    from .tasks.base import make_rng

    tokens, doc_starts = task.corpus(split)
    count = max(len(tokens) - 1, 0) // task.seq_len  # whole windows: seq_len inputs and their targets
    if n > count:
        raise ValueError(f"--n {n} is invalid: the {split} split of {task.name} holds {count} whole windows of "
                         f"{task.seq_len} tokens: must be an int in [1, {count}]")
    starts = np.sort(make_rng(seed, split).choice(count, size=n, replace=False)) * task.seq_len
    batch = task._batch(tokens, doc_starts, starts, starts + task.seq_len + 1)  # the task's own windows
    return dataclasses.replace(batch, groups=torch.arange(n), label_positions=batch.lengths - 1)
