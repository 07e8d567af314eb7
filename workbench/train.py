"""The short-run trainer: one loop for every mechanism x schedule.

``train(TrainConfig)`` (and ``python -m workbench train``) builds the task and the model, then at
each step asks a *plan* which schedule and how many passes this batch gets (single-pass before
``feedback_start``; FBT's pass mix drawn from ``(seed, step)``), runs that schedule, and
back-propagates its objective. Everything a step does is a pure function of ``(seed, step)`` and the
restored state, which is what makes resume exact:

- the data of step i is ``TrainStream(task, batch_size, seed).batch(i)``, the *global* batch: each
  process takes a contiguous slice of it and splits that into ``grad_accum`` micro-batches, so the
  maths of a step does not depend on how many processes or micro-batches compute it (FBT's jitter
  noise aside: its draws follow the micro-batch shape);
- the pass count and the plain-prefix lengths come from numpy generators seeded with
  ``(seed, purpose, step)``; the global torch RNG (FBT's jitter draws from it inside the forward)
  is reseeded from ``(seed, step, rank)`` before every step, inside ``fork_rng`` so the caller's
  RNG is untouched. So no RNG state needs saving: the checkpoint holds weights, optimiser state
  (safetensors + JSON) and the step counters (``train_state.json``).

Each micro-batch's pass losses are summed and divided by the global batch's target counts, so the
objective summed over micro-batches and processes is the global batch's, whatever the split.
Under ``torchrun`` the schedules call ``model.step`` many times per batch, which a
DistributedDataParallel wrapper would not see (its hooks fire on ``forward``); gradients are
therefore all-reduced by hand (one flattened ``all_reduce``) after the micro-batches, before
clipping: the same result, with no wrapper in the way of the schedules.

The run directory holds ``train_config.json``, ``history.csv`` (one row per logged step),
``loss.png`` and ``checkpoint/`` (replaced atomically; only rank 0 writes anything). It belongs to
one trainer at a time: rank 0 holds an OS lock on ``.trainer.lock`` (which names it) for the whole
run, so a second trainer on the same directory fails at once instead of interleaving its history
with the first's.

The command's flags live with the other commands (``cli``), the live loss curve a notebook passes as
``callback`` with the widgets (``widgets.live``): neither is the loop's business.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import math
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm.auto import tqdm

from . import schedules, tasks
from .checkpoint import (
    WEIGHTS,
    CheckpointError,
    check_weights,
    find_checkpoint,
    read_checkpoint,
    read_json,
    save_checkpoint,
    write_json_atomic,
)
from .model import GPT, build_model
from .optim import build_optimizers, load_optimizer_state, lr_factor, optimizer_state, set_lr
from .train_config import TrainConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Purposes of derived random streams: distinct, so no two draws ever share a seed.
_INIT, _PASSES, _PREFIX, _TORCH = 1, 2, 3, 4
CHECKPOINT_DIR = "checkpoint"
HISTORY_FILE = "history.csv"
FIGURE_FILE = "loss.png"
CONFIG_FILE = "train_config.json"
STATE_FILE = "train_state.json"
LOCK_FILE = ".trainer.lock"
EVAL_COLUMNS = ("val_loss", "val_bpb", "val_accuracy")

Callback = Callable[[dict[str, Any]], None]


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/inf loss or gradient; the last good checkpoint was kept."""


@dataclass
class TrainResult:
    """What a run leaves behind (``model`` is in eval mode, unwrapped, on the training device)."""

    history: pd.DataFrame
    model: GPT
    checkpoint_dir: Path | None
    metrics: dict[str, Any]
    config: TrainConfig


@dataclass
class StepPlan:
    """How one step computes its batch."""

    schedule: str
    passes: int  # Jacobi passes (multipass); 1 for every other schedule
    flops: float  # training FLOPs of the whole (global) batch under this schedule


def derived_seed(seed: int, purpose: int, *keys: int) -> int:
    """A 64-bit seed for one purpose and (step, rank, ...), well mixed by numpy's SeedSequence."""
    return int(np.random.SeedSequence([seed, purpose, *keys]).generate_state(1, dtype=np.uint64)[0])


def history_columns(cfg: TrainConfig) -> list[str]:
    """The columns of ``history.csv`` (fixed per config, so an appended file stays rectangular)."""
    passes = [f"loss_pass{k}" for k in range(1, cfg.max_passes + 1)]
    return ["step", "tokens", "flops", "passes", "loss", *passes, "lr", "grad_norm", "seconds", *EVAL_COLUMNS]


# ---------------------------------------------------------------------------------------------- processes
@dataclass
class _Processes:
    """This process's place in a (possibly single-process) torchrun job, and its device."""

    device: torch.device
    rank: int = 0
    world: int = 1
    owns_group: bool = False  # we initialised the process group, so we tear it down

    @classmethod
    def start(cls, device: str) -> _Processes:
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        if cuda and not torch.cuda.is_available():
            raise ValueError(f"TrainConfig.device={device!r} is invalid: CUDA is not available here")
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        default = f"cuda:{local_rank}" if cuda else "cpu"
        dev = torch.device(device if device.startswith("cuda:") else default)
        if cuda:
            torch.cuda.set_device(dev)
        if world == 1:
            return cls(dev)
        owns = not dist.is_initialized()
        if owns:
            dist.init_process_group("nccl" if cuda else "gloo")
        return cls(dev, dist.get_rank(), dist.get_world_size(), owns)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def sum_(self, tensors: list[torch.Tensor]) -> None:
        """All-reduce (sum) a list of tensors in place through one flattened buffer."""
        if self.world == 1 or not tensors:
            return
        flat = torch.cat([t.reshape(-1) for t in tensors])
        dist.all_reduce(flat)
        offset = 0
        for t in tensors:
            t.copy_(flat[offset: offset + t.numel()].view_as(t))
            offset += t.numel()

    def close(self) -> None:
        if self.owns_group:
            dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------- history
def _cell(value: Any) -> str:
    """Exact text for a CSV cell: repr of floats round-trips bit for bit; missing values are empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(float(value)) if isinstance(value, float) else str(value)


def _parse_cell(text: str) -> float | int | None:
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


class _History:
    """Rows in memory and, on rank 0 with a run directory, appended to ``history.csv`` as they come."""

    def __init__(self, columns: list[str], path: Path | None, keep_until: int | None) -> None:
        """``keep_until``: resuming from that step, keep the file's rows up to it and drop later ones
        (written after the checkpoint by the interrupted run); None starts a fresh file."""
        self.columns, self.path, self.rows = columns, path, []
        if path is None:
            return
        kept: list[list[str]] = []
        if keep_until is not None and path.exists():
            with path.open(newline="") as f:
                lines = list(csv.reader(f))
            if lines and lines[0] != columns:
                raise ValueError(f"{path} has columns {lines[0]}, this config writes {columns}")
            rows = [r for r in lines[1:] if len(r) == len(columns)]  # a row cut by a kill is dropped
            if not all(r[0].isdigit() for r in rows):
                raise ValueError(f"{path} has rows whose step is not a step number: not this trainer's history")
            kept = [r for r in rows if int(r[0]) <= keep_until]
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("w", newline="") as f:
            csv.writer(f).writerows([columns, *kept])
        os.replace(tmp, path)
        self.rows = [{c: _parse_cell(v) for c, v in zip(columns, r)} for r in kept]

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self.path is not None:
            with self.path.open("a", newline="") as f:
                csv.writer(f).writerow([_cell(row.get(c)) for c in self.columns])

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=self.columns).astype(float).astype({"step": int, "tokens": int,
                                                                                     "passes": int})


# ---------------------------------------------------------------------------------------------- figures
def _loss_figure(history: pd.DataFrame, title: str) -> Figure:
    """``plots.loss_curves``, imported on first use (plots pulls in seaborn, which a run may not need)."""
    from .plots import loss_curves

    return loss_curves(history, title=title)


# ---------------------------------------------------------------------------------------------- the run
def _pad(t: torch.Tensor, length: int, value: int) -> torch.Tensor:
    """Right-pad (n, T') to (n, length): every batch has the task's seq_len, so compute is fixed per step."""
    return F.pad(t, (0, length - t.size(1)), value=value)


class _Run:
    """State and steps of one training run (one per process under torchrun)."""

    def __init__(self, cfg: TrainConfig, procs: _Processes) -> None:
        self.cfg, self.procs, self.device = cfg, procs, procs.device
        shards = procs.world * cfg.grad_accum
        if cfg.batch_size % shards:
            raise ValueError(f"TrainConfig.batch_size={cfg.batch_size} is invalid: must be divisible by "
                             f"processes x grad_accum = {procs.world} x {cfg.grad_accum}")
        self.task = tasks.get(cfg.task, **cfg.task_params)
        self.T = self.task.seq_len
        self.pad_id = self.task.tokenizer.pad_id
        self.bytes_per_token = float(getattr(self.task, "bytes_per_token", 1.0))
        self.stream = tasks.TrainStream(self.task, cfg.batch_size, seed=cfg.seed)
        torch.manual_seed(derived_seed(cfg.seed, _INIT))
        model_config = cfg.model_config(self.task.vocab_size, self.T)
        self.model = build_model(model_config, device=self.device).train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizers = build_optimizers(self.model, cfg)
        per_rank = cfg.batch_size // procs.world
        self.rows = (procs.rank * per_rank, (procs.rank + 1) * per_rank)  # this process's slice
        self.micro = per_rank // cfg.grad_accum
        val = self.task.sample(cfg.eval_size, seed=cfg.eval_seed, split="val")
        self.val_tokens = _pad(val.tokens, self.T, self.pad_id)
        self.val_targets = _pad(val.targets, self.T, -1)
        self.step, self.tokens, self.flops, self.seconds = 0, 0, 0.0, 0.0
        # compiled: one graph per (schedule, pass count, train/eval mode), each traced on first use
        self.schedule_fn = torch.compile(schedules.run) if cfg.compile else schedules.run

    # ------------------------------------------------------------------ what a step does
    def plan(self, step: int) -> StepPlan:
        """Schedule and pass count of 0-based ``step``: single before feedback_start, then the mix."""
        cfg = self.cfg
        if step < cfg.feedback_start * cfg.steps:
            schedule, passes = "single", 1
        elif cfg.pass_mix:
            rng = np.random.default_rng([cfg.seed, _PASSES, step])
            passes = int(rng.choice(list(cfg.pass_mix), p=list(cfg.pass_mix.values())))
            schedule = cfg.schedule
        else:
            schedule, passes = cfg.schedule, cfg.passes if cfg.schedule == "multipass" else 1
        flops = schedules.schedule_flops(self.model, schedule, cfg.batch_size, self.T, passes, cfg.subsets)
        return StepPlan(schedule, passes, flops)

    def plain_prefix(self, step: int, plan: StepPlan) -> torch.Tensor:
        """(B,) plain-prefix lengths for the global batch (FBT's prefix mix-in); zeros = none."""
        B, cfg = self.cfg.batch_size, self.cfg
        if plan.schedule == "single" or cfg.prefix_mixin == 0 or self.T < 2:
            return torch.zeros(B, dtype=torch.long)
        rng = np.random.default_rng([cfg.seed, _PREFIX, step])
        use = rng.random(B) < cfg.prefix_mixin
        return torch.from_numpy(np.where(use, rng.integers(1, self.T, size=B), 0))

    def micro_batches(self, step: int, plan: StepPlan) -> Iterator[tuple[torch.Tensor, ...]]:
        """This process's micro-batches (tokens, targets, plain prefixes) and the global batch's targets."""
        batch = self.stream.batch(step)
        tokens, targets = _pad(batch.tokens, self.T, self.pad_id), _pad(batch.targets, self.T, -1)
        prefix = self.plain_prefix(step, plan)
        for rows in torch.arange(*self.rows).split(self.micro):
            yield (tokens[rows].to(self.device), targets[rows].to(self.device), prefix[rows].to(self.device),
                   targets)

    @staticmethod
    def pass_parts(out: schedules.ScheduleOutput, targets: torch.Tensor,
                   global_targets: torch.Tensor) -> list[torch.Tensor]:
        """Each pass's summed loss over this micro-batch, divided by the global batch's target count there.

        Summed over micro-batches and processes this is each pass's mean loss over the global batch,
        exactly, whatever the split; a pass with no targets (an interleaved subset that misses an
        answer-only task's targets) contributes 0 instead of the NaN of an empty mean.
        """
        sums = out.pass_losses(targets, reduction="sum")
        return [nats / (global_targets if pos is None else global_targets[:, pos.cpu()]).ge(0).sum().clamp(min=1)
                .to(nats.device) for nats, pos in zip(sums, out.pass_positions)]

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on CUDA; full precision on CPU."""
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def run_schedule(self, schedule: str, passes: int, tokens: torch.Tensor,
                     prefix: torch.Tensor | int = 0) -> schedules.ScheduleOutput:
        cfg = self.cfg
        return self.schedule_fn(self.model, tokens, schedule, passes=passes, subsets=cfg.subsets,
                                block=cfg.block, plain_prefix=prefix, aux_weight=cfg.aux_weight)

    def train_step(self, step: int, plan: StepPlan) -> dict[str, Any]:
        """One optimiser step; returns its history values. Raises NonFiniteLossError before updating."""
        cfg = self.cfg
        torch.manual_seed(derived_seed(cfg.seed, _TORCH, step, self.procs.rank))
        stats = torch.zeros(1 + cfg.max_passes, device=self.device)  # objective, then each pass's loss
        n_losses = 0
        for tokens, targets, prefix, global_targets in self.micro_batches(step, plan):
            with self.autocast():
                out = self.run_schedule(plan.schedule, plan.passes, tokens, prefix)
                parts = self.pass_parts(out, targets, global_targets)
                loss = sum(w * part for w, part in zip(out.loss_weights, parts))
            loss.backward()
            n_losses = len(parts)
            stats[: 1 + n_losses] += torch.stack([loss, *parts]).detach().float()
        grads = [p.grad for p in self.params if p.grad is not None]
        self.procs.sum_([stats, *grads])
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        loss_value, norm_value = stats[0].item(), grad_norm.item()
        if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
            raise NonFiniteLossError(f"non-finite training loss ({loss_value}) or gradient norm "
                                     f"({norm_value}) at step {step + 1}; no update was applied")
        factor = lr_factor(cfg, step)
        set_lr(self.optimizers, factor)
        for opt in self.optimizers.values():
            opt.step()
            opt.zero_grad(set_to_none=True)
        values = stats.tolist()
        row = {"passes": plan.passes, "loss": values[0], "lr": cfg.lr * factor, "grad_norm": norm_value}
        row.update({f"loss_pass{k}": values[k] for k in range(1, n_losses + 1)})
        return row

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Held-out loss, bits per byte and accuracy (argmax at target positions) of the final estimate.

        The schedule is the run's own (``passes`` deep for multipass), sharded across processes.
        """
        cfg = self.cfg
        self.model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # nats, correct, targets
        n = self.val_tokens.size(0)
        for rows in torch.arange(n)[self.procs.rank:: self.procs.world].split(self.micro):
            tokens, targets = self.val_tokens[rows].to(self.device), self.val_targets[rows].to(self.device)
            with self.autocast():
                logits = self.run_schedule(cfg.schedule, cfg.passes, tokens).logits.float()
            valid = targets >= 0
            sums[0] += F.cross_entropy(logits[valid], targets[valid], reduction="sum").double()
            sums[1] += (logits.argmax(-1)[valid] == targets[valid]).sum()
            sums[2] += valid.sum()
        self.procs.sum_([sums])
        self.model.train()
        nats, correct, count = sums.tolist()
        loss = nats / max(count, 1.0)
        return {"val_loss": loss, "val_bpb": loss / math.log(2) / self.bytes_per_token,
                "val_accuracy": correct / max(count, 1.0)}

    # ------------------------------------------------------------------ state on disk
    @property
    def stop_reason(self) -> str:
        """Why the run ends where it is: all its steps, or the FLOP budget."""
        return "steps" if self.step == self.cfg.steps else "budget"

    def counters(self) -> dict[str, Any]:
        return {"step": self.step, "tokens": self.tokens, "flops": self.flops, "seconds": self.seconds}

    def save(self, path: Path, metrics: dict[str, Any]) -> None:
        tensors, meta = optimizer_state(self.optimizers)
        save_checkpoint(self.model, path, metrics={**self.counters(), **metrics},
                        extra={"task": self.cfg.task, "task_params": self.task.params,
                               "train_config": self.cfg.to_dict()},
                        extra_files={"optimizer.safetensors": tensors, "optimizer.json": meta,
                                     STATE_FILE: self.counters()})

    def restore(self, path: Path) -> None:
        """Weights, optimiser state and counters from one version of a checkpoint this config wrote,
        all checked before anything is used (a bad state file must not cut the history short)."""
        files = read_checkpoint(path, (WEIGHTS, "optimizer.safetensors", "optimizer.json", STATE_FILE))
        state = files[STATE_FILE]
        check_counters(state, path / STATE_FILE, self.cfg.steps)
        check_weights(files[WEIGHTS], self.model.config, path / WEIGHTS)
        self.model.load_state_dict({k: v.to(self.device) for k, v in files[WEIGHTS].items()})
        load_optimizer_state(self.optimizers, files["optimizer.safetensors"], files["optimizer.json"])
        self.step, self.tokens, self.flops, self.seconds = (state["step"], state["tokens"], state["flops"],
                                                            state["seconds"])


def check_counters(state: Any, where: Path, steps: int) -> None:
    """``train_state.json``: step in [1, steps], tokens an int >= 0, flops and seconds numbers >= 0."""
    def number(key: str, kinds: tuple[type, ...]) -> bool:
        v = state.get(key)
        return isinstance(v, kinds) and not isinstance(v, bool) and math.isfinite(v) and v >= 0

    if not (isinstance(state, dict) and number("step", (int,)) and 1 <= state["step"] <= steps
            and number("tokens", (int,)) and number("flops", (int, float)) and number("seconds", (int, float))):
        raise CheckpointError(f"{where} is invalid: needs step (an int in [1, {steps}]), tokens (an int >= 0), "
                              f"flops and seconds (numbers >= 0); got {str(state)[:200]}")


def _logged_rows(path: Path) -> bool:
    """Whether ``history.csv`` holds any row past its header."""
    if not path.is_file():
        return False
    with path.open() as f:
        return len(f.readlines()[:2]) > 1


def _stored_config(out: Path) -> dict[str, Any]:
    """The trajectory of the run stored in ``out``, any problem a ``ValueError`` naming the file."""
    data = read_json(out / CONFIG_FILE)
    try:
        return TrainConfig.from_dict(data).trajectory_dict()
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{out / CONFIG_FILE} is not a valid train config: {e}") from None


def _prepare_run_dir(cfg: TrainConfig, main: bool) -> tuple[Path | None, bool]:
    """Check the run directory against ``resume``; return it and whether a checkpoint is to be loaded."""
    if cfg.out_dir is None:
        return None, False
    out = Path(cfg.out_dir)
    has_checkpoint = find_checkpoint(out / CHECKPOINT_DIR) is not None
    if has_checkpoint and not cfg.resume:
        raise ValueError(f"{out} already holds a run (checkpoint/): pass resume=True (--resume) to "
                         f"continue it, or choose another out_dir")
    if cfg.resume and not has_checkpoint and _logged_rows(out / HISTORY_FILE):
        raise ValueError(f"cannot resume {out}: {HISTORY_FILE} holds a run but there is no usable checkpoint at "
                         f"{out / CHECKPOINT_DIR}; rerun without --resume to start over (replacing its history), "
                         f"or choose another out_dir")
    if cfg.resume and has_checkpoint:
        previous, current = _stored_config(out), cfg.trajectory_dict()
        diff = sorted(k for k, v in current.items() if k != "out_dir" and previous.get(k) != v)
        if Path(str(previous.get("out_dir"))).resolve() != out.resolve():
            diff.append("out_dir")
        if diff:
            raise ValueError(f"cannot resume {out}: the config differs in {diff} (stored: "
                             f"{[previous.get(k) for k in diff]}); rerun the original command with --resume")
    elif main:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / CONFIG_FILE, cfg.to_dict())
    return out, cfg.resume and has_checkpoint


@contextlib.contextmanager
def hold_run_dir(out_dir: str | None) -> Iterator[None]:
    """Hold the run directory's lock for the block (``None``: nothing to hold, e.g. ranks > 0).

    ``flock`` is released by the kernel however the holder ends (kill -9 included), so a stale
    lock file never blocks anyone; its text only names the holder for the error message.
    """
    if out_dir is None:
        yield
        return
    out = Path(out_dir)
    if os.path.lexists(out) and not out.is_dir():
        raise ValueError(f"TrainConfig.out_dir={out_dir!r} is invalid: {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "a process that has not named itself"
            os.close(fd)
            raise ValueError(f"{out} is in use by another trainer ({holder}); wait for it to finish or choose "
                             f"another out_dir") from None
        if os.path.exists(path) and os.path.samestat(os.fstat(fd), os.stat(path)):
            break
        os.close(fd)  # the previous holder removed the file between our open and our lock: take the new one
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
              .encode(), 0)
    try:
        yield
    finally:
        os.unlink(path)
        os.close(fd)


def train(cfg: TrainConfig, callback: Callback | None = None) -> TrainResult:
    """Train a model as ``cfg`` says; ``callback(row)`` is called (rank 0) for every history row.

    Stops after ``cfg.steps`` steps, or before the step that would take the training FLOPs past
    ``cfg.budget_flops``. Raises ``NonFiniteLossError`` on a NaN/inf loss or gradient (the last good
    checkpoint stays on disk) and ``ValueError`` for a bad config or a run directory that does not fit.
    """
    procs = _Processes.start(cfg.device)
    try:
        with hold_run_dir(cfg.out_dir if procs.main else None), \
                torch.random.fork_rng(devices=[procs.device] if procs.device.type == "cuda" else []):
            return _train(cfg, procs, callback)
    finally:
        procs.close()


def _train(cfg: TrainConfig, procs: _Processes, callback: Callback | None) -> TrainResult:
    out, resuming = _prepare_run_dir(cfg, procs.main)
    run = _Run(cfg, procs)
    ckpt = None if out is None else out / CHECKPOINT_DIR
    if resuming:
        run.restore(ckpt)
    history = _History(history_columns(cfg), out / HISTORY_FILE if out is not None and procs.main else None,
                       keep_until=run.step if resuming else None)
    budget = cfg.budget_flops if cfg.budget_flops is not None else math.inf
    if run.step == 0 and run.plan(0).flops > budget:
        raise ValueError(f"TrainConfig.budget_flops={cfg.budget_flops} is invalid: smaller than one step "
                         f"({run.plan(0).flops:.4g} FLOPs)")
    bar = tqdm(total=cfg.steps, initial=run.step, disable=not (cfg.progress and procs.main), desc="train",
               dynamic_ncols=True)
    saved_at = run.step if resuming else None  # step of the checkpoint on disk
    last_eval: dict[str, float] = {}
    try:
        while run.step < cfg.steps:
            plan = run.plan(run.step)
            if run.flops + plan.flops > budget:
                break
            started = time.perf_counter()
            try:
                row = run.train_step(run.step, plan)
            except NonFiniteLossError as e:
                where = f"the last good checkpoint is {ckpt} (step {saved_at})" if saved_at is not None \
                    else "no checkpoint was written"
                raise NonFiniteLossError(f"{e}; training stopped, {where}") from None
            step_seconds = time.perf_counter() - started
            run.step += 1
            run.tokens += cfg.batch_size * run.T
            run.flops += plan.flops
            last = run.step == cfg.steps or run.flops + run.plan(run.step).flops > budget
            evaluate = last or (cfg.eval_every > 0 and run.step % cfg.eval_every == 0)
            last_eval = run.evaluate() if evaluate else {}
            run.seconds += time.perf_counter() - started
            if evaluate or run.step % cfg.log_every == 0:
                row.update(step=run.step, tokens=run.tokens, flops=run.flops, seconds=run.seconds,
                           **last_eval)
                history.append(row)
                if callback is not None and procs.main:
                    callback(dict(row))
            periodic = cfg.checkpoint_every > 0 and run.step % cfg.checkpoint_every == 0
            if ckpt is not None and (last or periodic):
                if procs.main:
                    run.save(ckpt, {"train_loss": row["loss"], **last_eval,
                                    **({"stop_reason": run.stop_reason} if last else {})})
                saved_at = run.step
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.4f}", tok_s=f"{cfg.batch_size * run.T / step_seconds:.0f}",
                            refresh=False)
    finally:
        bar.close()
        if out is not None and procs.main and history.rows:
            title = f"{cfg.task}: {cfg.model.get('mechanism', 'none')}, {cfg.schedule}"
            _loss_figure(history.frame(), title).savefig(out / FIGURE_FILE, dpi=100)
    metrics = {**run.counters(), "stop_reason": run.stop_reason, **(last_eval or run.evaluate())}
    return TrainResult(history.frame(), run.model.eval(), ckpt, metrics, cfg)
