"""The trainer: one loop for every mechanism x schedule. A step is a pure function of ``(seed, step)`` and the
restored state, so resume is exact with no RNG state saved; losses are normalised by the global batch, so the split
does not matter. Gradients are all-reduced by hand: DDP's ``forward`` hooks would miss ``model.step``."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm.auto import tqdm

from . import schedules, tasks
from .checkpoint import WEIGHTS, check_weights, load_checkpoint, read_checkpoint, save_checkpoint
from .model import GPT, FeedbackModel, build_model, check_model
from .optim import build_optimizers, load_optimizer_state, lr_factor, optimizer_state, set_lr
from .run_dir import (
    CHECKPOINT_DIR,
    HISTORY_FILE,
    STATE_FILE,
    History,
    check_counters,
    history_columns,
    hold_run_dir,
    prepare_run_dir,
)
from .train_config import TrainConfig
from .validation import fail

# Purposes of derived random streams: distinct, so no two draws ever share a seed.
_INIT, _PASSES, _PREFIX, _TORCH = 1, 2, 3, 4

Callback = Callable[[dict[str, Any]], None]


class NonFiniteLossError(RuntimeError):
    """A NaN/inf loss or gradient; the last good checkpoint was kept."""


@dataclass
class TrainResult:
    """What a run leaves (``model`` in eval mode, on the training device)."""

    history: pd.DataFrame
    model: GPT
    checkpoint_dir: Path | None
    metrics: dict[str, Any]
    config: TrainConfig


@dataclass
class StepPlan:
    """How one step computes its batch."""

    schedule: schedules.Schedule  # this batch's own: single before feedback_start, a drawn depth under a mix
    flops: float  # training FLOPs of the whole (global) batch under this schedule
    seq_len: int  # the length the batch is padded to: the task's seq_len, or its own (Task.batch_length_varies)

    @property
    def passes(self) -> int:
        """Jacobi passes; 1 for non-multipass schedules."""
        return self.schedule.jacobi_passes


# model fields a fine-tune may change (TrainConfig.init_from): none changes which parameters there are
FINE_TUNABLE = ("fbt_jitter", "fbt_fusion", "seq_len")


def _start_from(model: GPT, path: str) -> None:
    """Copy a checkpoint's weights into ``model``; configs must match outside ``FINE_TUNABLE``."""
    source = load_checkpoint(path)
    kept = {name: getattr(model.config, name) for name in FINE_TUNABLE}
    if dataclasses.replace(source.config, **kept) != model.config:
        fail("TrainConfig.init_from", path,
             f"model config {source.config.to_dict()} differs from {model.config.to_dict()}")
    with torch.no_grad():
        model.load_state_dict({k: v.to(model.wte.weight.dtype) for k, v in source.state_dict().items()})


def derived_seed(seed: int, purpose: int, *keys: int) -> int:
    """A 64-bit seed for one purpose and (step, rank, ...)."""
    return int(np.random.SeedSequence([seed, purpose, *keys]).generate_state(1, dtype=np.uint64)[0])


# ---------------------------------------------------------------------------------------------- processes
@dataclass
class _Processes:
    """This process's place in a torchrun job (or alone), and its device."""

    device: torch.device
    rank: int = 0
    world: int = 1
    owns_group: bool = False  # we initialised the process group, so we tear it down

    @classmethod
    def start(cls, device: str) -> _Processes:
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        if cuda and not torch.cuda.is_available():
            fail("TrainConfig.device", device, "CUDA is not available here")
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
        """All-reduce (sum) tensors in place through one buffer."""
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


# ---------------------------------------------------------------------------------------------- the run
def _pad(t: torch.Tensor, length: int, value: int) -> torch.Tensor:
    """Right-pad (n, T') to (n, length)."""
    return F.pad(t, (0, length - t.size(1)), value=value)


class _Run:
    """One training run's state and steps (one per process)."""

    def __init__(self, cfg: TrainConfig, procs: _Processes, model: FeedbackModel | None = None) -> None:
        self.cfg, self.procs, self.device = cfg, procs, procs.device
        shards = procs.world * cfg.grad_accum
        if cfg.batch_size % shards:
            raise ValueError(f"TrainConfig.batch_size={cfg.batch_size} is invalid: must divide by processes x "
                             f"grad_accum = {procs.world} x {cfg.grad_accum}")
        self.task = tasks.get(cfg.task, **cfg.task_params)
        self.T = self.task.seq_len
        self.pad_id = self.task.tokenizer.pad_id
        self.bytes_per_token = float(getattr(self.task, "bytes_per_token", 1.0))
        self.stream = tasks.TrainStream(self.task, cfg.batch_size, seed=cfg.seed)
        self._drawn: tuple[int, tasks.Batch] | None = None  # (step, its batch): see batch()
        torch.manual_seed(derived_seed(cfg.seed, _INIT))
        if model is None:
            model = build_model(cfg.model_config(self.task.vocab_size, self.T), device=self.device)
        else:
            _check_given_model(model, self.task, procs.world)
        self.model = model.to(self.device).train()
        if cfg.init_from is not None:
            _start_from(self.model, cfg.init_from)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizers = build_optimizers(self.model, cfg)
        per_rank = cfg.batch_size // procs.world
        self.rows = (procs.rank * per_rank, (procs.rank + 1) * per_rank)  # this process's slice
        self.micro = per_rank // cfg.grad_accum
        val = self.task.sample(cfg.eval_size, seed=cfg.eval_seed, split="val")
        self.val_tokens = _pad(val.tokens, self.T, self.pad_id)
        self.val_targets = _pad(val.targets, self.T, -1)
        # seconds are carried across a resume, so a resumed run's CPU time counts every part
        self.step, self.tokens, self.flops, self.seconds, self.cpu_seconds = 0, 0, 0.0, 0.0, 0.0
        self.schedule = cfg.schedule
        # compiled: one graph per (schedule, pass count, train/eval mode), each traced on first use
        self.schedule_fn = torch.compile(schedules.run) if cfg.compile else schedules.run

    # ------------------------------------------------------------------ what a step does
    def plan(self, step: int) -> StepPlan:
        """Schedule of 0-based ``step``: single before feedback_start, then the run's own."""
        cfg = self.cfg
        schedule = self.schedule
        if step < cfg.feedback_start * cfg.steps:
            schedule = schedules.Single()
        else:
            schedule = schedule.draw(np.random.default_rng([cfg.seed, _PASSES, step]))
        length = self.batch(step).tokens.size(1) if self.task.batch_length_varies else self.T
        return StepPlan(schedule, schedule.flops(self.model, cfg.batch_size, length), length)

    def batch(self, step: int) -> tasks.Batch:
        """The global batch of ``step``, drawn once (``plan`` may need its length first)."""
        if self._drawn is None or self._drawn[0] != step:
            self._drawn = (step, self.stream.batch(step))
        return self._drawn[1]

    def plain_prefix(self, step: int, plan: StepPlan) -> torch.Tensor:
        """Plain-prefix lengths: (B,), or (passes - 1, B) under ``prefix_draw="pass"``."""
        B, cfg = self.cfg.batch_size, self.cfg
        if not plan.schedule.reads_memory or cfg.prefix_mixin == 0 or plan.seq_len < 2:
            return torch.zeros(B, dtype=torch.long)
        rng = np.random.default_rng([cfg.seed, _PREFIX, step])
        shape = (plan.passes - 1, B) if cfg.prefix_draw == "pass" else B
        use = rng.random(shape) < cfg.prefix_mixin
        return torch.from_numpy(np.where(use, rng.integers(1, plan.seq_len, size=shape), 0))

    def micro_batches(self, step: int, plan: StepPlan) -> Iterator[tuple[torch.Tensor, ...]]:
        """(tokens, targets, prefixes, global targets) per micro-batch."""
        batch = self.batch(step)
        tokens, targets = _pad(batch.tokens, plan.seq_len, self.pad_id), _pad(batch.targets, plan.seq_len, -1)
        prefix = self.plain_prefix(step, plan)
        for rows in torch.arange(*self.rows).split(self.micro):
            yield (tokens[rows].to(self.device), targets[rows].to(self.device), prefix[..., rows].to(self.device),
                   targets)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 on CUDA; full precision on CPU."""
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def run_schedule(self, schedule: schedules.Schedule, tokens: torch.Tensor,
                     prefix: torch.Tensor | int = 0) -> schedules.ScheduleOutput:
        return self.schedule_fn(self.model, tokens, schedule, plain_prefix=prefix)

    def train_step(self, step: int, plan: StepPlan) -> dict[str, Any]:
        """One optimiser step; NonFiniteLossError before a bad update."""
        cfg = self.cfg
        torch.manual_seed(derived_seed(cfg.seed, _TORCH, step, self.procs.rank))
        stats = torch.zeros(1 + cfg.max_passes, device=self.device)  # objective, then each pass's loss
        n_losses = 0
        for tokens, targets, prefix, global_targets in self.micro_batches(step, plan):
            with self.autocast():
                out = self.run_schedule(plan.schedule, tokens, prefix)
                # each pass's mean over the global batch, exactly, whatever the split into micro-batches
                parts = out.pass_losses(targets, normaliser=global_targets)
                loss = out.objective(parts)
            loss.backward()
            n_losses = len(parts)
            stats[: 1 + n_losses] += torch.stack([loss, *parts]).detach().float()
        grads = [p.grad for p in self.params if p.grad is not None]
        self.procs.sum_([stats, *grads])
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        loss_value, norm_value = stats[0].item(), grad_norm.item()
        if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
            raise NonFiniteLossError(f"non-finite loss ({loss_value}) or gradient norm ({norm_value}) at step "
                                     f"{step + 1}; no update applied")
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
        """Held-out loss, bits per byte and accuracy under the run's own schedule."""
        self.model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # nats, correct, targets
        n = self.val_tokens.size(0)
        for rows in torch.arange(n)[self.procs.rank:: self.procs.world].split(self.micro):
            tokens, targets = self.val_tokens[rows].to(self.device), self.val_targets[rows].to(self.device)
            with self.autocast():
                logits = self.run_schedule(self.schedule, tokens).logits.float()
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
        """"steps" or "budget"."""
        return "steps" if self.step == self.cfg.steps else "budget"

    def counters(self) -> dict[str, Any]:
        return {"step": self.step, "tokens": self.tokens, "flops": self.flops, "seconds": self.seconds,
                "cpu_seconds": self.cpu_seconds}

    def save(self, path: Path, metrics: dict[str, Any]) -> None:
        tensors, meta = optimizer_state(self.optimizers)
        save_checkpoint(self.model, path, metrics={**self.counters(), **metrics},
                        extra={"task": self.cfg.task, "task_params": self.task.params,
                               "train_config": self.cfg.to_dict()},
                        extra_files={"optimizer.safetensors": tensors, "optimizer.json": meta,
                                     STATE_FILE: self.counters()})

    def restore(self, path: Path) -> None:
        """Weights, optimiser state and counters, all checked before any is used."""
        files = read_checkpoint(path, (WEIGHTS, "optimizer.safetensors", "optimizer.json", STATE_FILE))
        state = files[STATE_FILE]
        check_counters(state, path / STATE_FILE, self.cfg.steps)
        check_weights(files[WEIGHTS], self.model.config, path / WEIGHTS)
        self.model.load_state_dict({k: v.to(self.device) for k, v in files[WEIGHTS].items()})
        load_optimizer_state(self.optimizers, files["optimizer.safetensors"], files["optimizer.json"])
        self.step, self.tokens, self.flops, self.seconds, self.cpu_seconds = (
            state["step"], state["tokens"], state["flops"], state["seconds"], state["cpu_seconds"])


def progress_losses(row: dict[str, Any]) -> dict[str, str]:
    """Each pass's loss rather than their sum, which scales with the pass count."""
    passes = {name.removeprefix("loss_"): value for name, value in row.items() if name.startswith("loss_pass")}
    if len(passes) <= 1:
        return {"loss": f"{row['loss']:.4f}"}
    return {k: f"{v:.3f}" for k, v in passes.items()}


def _check_given_model(model: FeedbackModel, task: tasks.Task, world: int) -> None:
    """Refuse too small a vocabulary, or torchrun (the copies would not start equal)."""
    vocab = model.readout_weight.shape[0]
    if vocab < task.vocab_size:
        raise ValueError(f"model reads {vocab} token ids, task {task.name} uses {task.vocab_size}")
    if world > 1:
        raise ValueError(f"model= trains in one process, not {world}: use TrainConfig.model")


def train(cfg: TrainConfig, callback: Callback | None = None, *, model: FeedbackModel | None = None) -> TrainResult:
    """Train as ``cfg`` says; ``callback(row)`` gets each history row, ``callback.on_train_end(history)`` the end.
    ``model``: train this ``FeedbackModel`` in place (not saved)."""
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    if callback is not None and not callable(callback):
        fail("callback", callback, "must be None or a callable")
    cfg = cfg.replace()  # validated again: a field changed after construction is checked before any step
    if model is not None:
        check_model(model)
        for name in ("out_dir", "init_from"):
            if getattr(cfg, name) is not None:
                raise ValueError(f"TrainConfig.{name}={getattr(cfg, name)!r} is invalid with model=: must be None")
        if cfg.model:
            raise ValueError(f"TrainConfig.model={cfg.model!r} is invalid with model=: must be empty")
    procs = _Processes.start(cfg.device)
    try:
        with hold_run_dir(cfg.out_dir if procs.main else None), \
                torch.random.fork_rng(devices=[procs.device] if procs.device.type == "cuda" else []):
            return _train(cfg, procs, callback, model)
    finally:
        procs.close()


def _train(cfg: TrainConfig, procs: _Processes, callback: Callback | None,
           model: FeedbackModel | None) -> TrainResult:
    out, resuming = prepare_run_dir(cfg, procs.main)
    run = _Run(cfg, procs, model)
    ckpt = None if out is None else out / CHECKPOINT_DIR
    resumed: dict[str, Any] = {}
    if resuming:
        run.restore(ckpt)
        resumed = {"resumed_from": str(ckpt), "resumed_at_step": run.step}
    history = History(history_columns(cfg), out / HISTORY_FILE if out is not None and procs.main else None,
                       keep_until=run.step if resuming else None)
    budget = cfg.budget_flops if cfg.budget_flops is not None else math.inf
    if run.step == 0 and run.plan(0).flops > budget:
        raise ValueError(f"TrainConfig.budget_flops={cfg.budget_flops} is invalid: below one step "
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
            started, cpu_started = time.perf_counter(), time.process_time()
            try:
                row = run.train_step(run.step, plan)
            except NonFiniteLossError as e:
                where = f"the last good checkpoint is {ckpt} (step {saved_at})" if saved_at is not None \
                    else "no checkpoint was written"
                raise NonFiniteLossError(f"{e}; training stopped, {where}") from None
            step_seconds = time.perf_counter() - started
            run.step += 1
            run.tokens += cfg.batch_size * plan.seq_len
            run.flops += plan.flops
            last = run.step == cfg.steps or run.flops + run.plan(run.step).flops > budget
            evaluate = last or (cfg.eval_every > 0 and run.step % cfg.eval_every == 0)
            last_eval = run.evaluate() if evaluate else {}
            run.seconds += time.perf_counter() - started
            run.cpu_seconds += time.process_time() - cpu_started
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
            bar.set_postfix(**progress_losses(row), tok_s=f"{cfg.batch_size * plan.seq_len / step_seconds:.0f}",
                            refresh=False)
    finally:
        bar.close()
        if procs.main and history.rows and hasattr(callback, "on_train_end"):
            callback.on_train_end(history.frame())
    if procs.main and run.stop_reason == "budget" and run.step > 0:
        warnings.warn(f"TrainConfig.budget_flops={cfg.budget_flops:g} stopped the run at step {run.step} of "
                      f"{cfg.steps}, its LR at {lr_factor(cfg, run.step - 1):.0%} of the peak: size steps with "
                      f"experiments.matched_steps", stacklevel=3)
    metrics = {**run.counters(), "stop_reason": run.stop_reason, **resumed, **(last_eval or run.evaluate())}
    return TrainResult(history.frame(), run.model.eval(), ckpt, metrics, cfg)
