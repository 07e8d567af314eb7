"""TrainConfig. Resume refuses a different config (outside ``RUNTIME_FIELDS``): the history would mix runs."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .config import JSONMixin, ModelConfig
from .schedules import SCHEDULES, Schedule, Single, parse
from .validation import check_choice, check_float, check_int, fail

OPTIMIZERS = ("muon", "adamw")
LR_SCHEDULES = ("wsd", "cosine", "constant")
DEVICES = ("auto", "cpu", "cuda")
PREFIX_DRAWS = ("sequence", "pass")
# Fields that may change when a run resumes: they do not change its trajectory (out_dir is where a run is, not what
# it is; how often it saves does not change its history).
RUNTIME_FIELDS = ("out_dir", "resume", "device", "progress", "budget_flops", "compile", "overwrite",
                  "checkpoint_every")
# Set from the task, never by the user.
TASK_MODEL_FIELDS = ("vocab_size", "seq_len")


@dataclass
class TrainConfig(JSONMixin):
    """One training run. The ``Attributes:`` below are also the CLI's help.

    Attributes:
        task: A name from ``tasks.names()``; it sets the model's ``vocab_size`` and ``seq_len``.
        task_params: Keyword arguments of ``tasks.get``.
        model: ``ModelConfig`` fields except ``vocab_size`` and ``seq_len``.
        schedule: A training schedule, its JSON form or name; ``Single()`` is the baseline.
        feedback_start: Fraction of the steps trained single-pass first, in [0, 1).
        prefix_mixin: Fraction of sequences with a plain prefix in later passes (FBT: works from a plain prompt).
        prefix_draw: ``"sequence"``: one prefix for all passes; ``"pass"``: a fresh draw per pass.
        steps: Optimiser steps.
        batch_size: Sequences per step over all processes and micro-batches.
        grad_accum: Micro-batches per process per step (memory only; same maths).
        optimizer: ``"muon"`` (hidden matrices; AdamW for the rest) or ``"adamw"``.
        lr: AdamW learning rate (everything under ``"adamw"``).
        lrt_gamma_lr: LRT's gamma in its own AdamW group (reference code: 0.5); None: at ``lr``.
        lrt_alpha_lr: The same for LRT's alpha (reference code: 0.005).
        matrix_lr: Muon learning rate.
        weight_decay: Decoupled weight decay of the hidden matrices.
        lr_schedule: ``"wsd"``, ``"cosine"`` or ``"constant"``.
        warmup_steps: Linear warmup length.
        decay_frac: ``"wsd"``: fraction of the steps spent decaying.
        min_lr_frac: Final learning rate as a fraction of the peak.
        grad_clip: Largest gradient norm; 0: no clipping (still logged).
        seed: Every random draw derives from it.
        init_from: A checkpoint directory whose weights start the run (same model config).
        eval_every: Held-out evaluation every N steps; 0: only at the end.
        eval_size: Held-out sequences per evaluation.
        eval_seed: Seed of the held-out sequences (fixed, so runs compare).
        log_every: One history row every N steps.
        checkpoint_every: Save every N steps; 0: only at the end.
        budget_flops: Stop before exceeding this many training FLOPs; None: no cap.
        out_dir: The run directory; None: nothing is written.
        resume: Continue from ``out_dir``'s checkpoint (same config only).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        progress: Draw a progress bar.
        compile: Use ``torch.compile`` (rounding differs slightly).
        overwrite: Let a fresh run replace files in ``out_dir`` that no run wrote."""

    # --- data ---
    task: str = "running_sum"
    task_params: dict[str, Any] = field(default_factory=dict)
    # --- model: ModelConfig fields except vocab_size and seq_len, which the task sets ---
    model: dict[str, Any] = field(default_factory=dict)
    # --- schedule ---
    schedule: Schedule = field(default_factory=Single)
    feedback_start: float = 0.0
    prefix_mixin: float = 0.0
    prefix_draw: str = "sequence"
    # --- optimisation ---
    steps: int = 200
    batch_size: int = 32
    grad_accum: int = 1
    optimizer: str = "muon"
    lr: float = 3e-3
    lrt_gamma_lr: float | None = None
    lrt_alpha_lr: float | None = None
    matrix_lr: float = 0.02
    weight_decay: float = 0.0
    lr_schedule: str = "wsd"
    warmup_steps: int = 0
    decay_frac: float = 0.2
    min_lr_frac: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    init_from: str | None = None
    # --- evaluation, logging, checkpoints ---
    eval_every: int = 0
    eval_size: int = 256
    eval_seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 0
    budget_flops: float | None = None
    out_dir: str | None = None
    # --- runtime ---
    resume: bool = False
    device: str = "auto"
    progress: bool = True
    compile: bool = False
    overwrite: bool = False

    def __post_init__(self) -> None:
        c = "TrainConfig"
        self._plain_numbers()
        if not isinstance(self.task, str) or not self.task:
            fail(f"{c}.task", self.task, "must be a task name")
        if not isinstance(self.task_params, dict) or not all(isinstance(k, str) for k in self.task_params):
            fail(f"{c}.task_params", self.task_params, "must be a dict with string keys")
        self._check_model(c)
        self._check_schedule(c)
        check_float(f"{c}.feedback_start", self.feedback_start, 0.0, 1.0)
        if self.feedback_start == 1.0:
            fail(f"{c}.feedback_start", self.feedback_start, "must be in [0, 1)")
        check_float(f"{c}.prefix_mixin", self.prefix_mixin, 0.0, 1.0)
        check_choice(f"{c}.prefix_draw", self.prefix_draw, PREFIX_DRAWS)
        if self.prefix_draw == "pass" and self.schedule.to_dict()["schedule"] != "multipass":
            fail(f"{c}.prefix_draw", self.prefix_draw, f"needs a multipass schedule, not {self.schedule.label!r}")
        check_int(f"{c}.steps", self.steps, 1)
        check_int(f"{c}.batch_size", self.batch_size, 1)
        check_int(f"{c}.grad_accum", self.grad_accum, 1, self.batch_size)
        if self.batch_size % self.grad_accum:
            fail(f"{c}.grad_accum", self.grad_accum, f"must divide batch_size={self.batch_size}")
        check_choice(f"{c}.optimizer", self.optimizer, OPTIMIZERS)
        check_float(f"{c}.lr", self.lr, 0.0, 10.0, lo_open=True)
        check_float(f"{c}.matrix_lr", self.matrix_lr, 0.0, 10.0, lo_open=True)
        for name in ("lrt_gamma_lr", "lrt_alpha_lr"):
            if getattr(self, name) is not None:
                check_float(f"{c}.{name}", getattr(self, name), 0.0, 10.0, lo_open=True)
                if self.model.get("mechanism") != "lrt" or "residual" not in self.model.get("lrt_inject",
                                                                                           ("residual",)):
                    fail(f"{c}.{name}", getattr(self, name), "needs mechanism='lrt' with residual injection")
        check_float(f"{c}.weight_decay", self.weight_decay, 0.0, 10.0)
        check_choice(f"{c}.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_int(f"{c}.warmup_steps", self.warmup_steps, 0, self.steps)
        check_float(f"{c}.decay_frac", self.decay_frac, 0.0, 1.0)
        check_float(f"{c}.min_lr_frac", self.min_lr_frac, 0.0, 1.0)
        check_float(f"{c}.grad_clip", self.grad_clip, 0.0)
        check_int(f"{c}.seed", self.seed, 0)
        if self.init_from is not None and (not isinstance(self.init_from, str) or not self.init_from):
            fail(f"{c}.init_from", self.init_from, "must be a path string or None")
        check_int(f"{c}.eval_every", self.eval_every, 0)
        check_int(f"{c}.eval_size", self.eval_size, 1)
        check_int(f"{c}.eval_seed", self.eval_seed, 0)
        check_int(f"{c}.log_every", self.log_every, 1)
        check_int(f"{c}.checkpoint_every", self.checkpoint_every, 0)
        if self.budget_flops is not None:
            check_float(f"{c}.budget_flops", self.budget_flops, 0.0, lo_open=True)
        if self.out_dir is not None and (not isinstance(self.out_dir, str) or not self.out_dir):
            fail(f"{c}.out_dir", self.out_dir, "must be a non-empty path string or None")
        for name in ("resume", "progress", "compile", "overwrite"):
            if not isinstance(getattr(self, name), bool):
                fail(f"{c}.{name}", getattr(self, name), "must be a bool")
        if self.resume and self.out_dir is None:
            fail(f"{c}.resume", self.resume, "needs out_dir")
        if not isinstance(self.device, str) or not (self.device in DEVICES
                                                    or self.device.startswith("cuda:")):
            fail(f"{c}.device", self.device, f"must be one of {DEVICES} or 'cuda:N'")

    def _check_model(self, c: str) -> None:
        """Validate through ``ModelConfig`` now (placeholder vocabulary); keep the values it normalised."""
        if not isinstance(self.model, dict):
            fail(f"{c}.model", self.model, "must be a dict of ModelConfig fields")
        given = sorted(set(self.model) & set(TASK_MODEL_FIELDS))
        if given:
            fail(f"{c}.model", self.model, f"must not set {given}: the task sets them")
        known = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown = sorted(set(self.model) - known)
        if unknown:
            fail(f"{c}.model", self.model, f"unknown ModelConfig field(s) {unknown}")
        model = dict(self.model)  # never mutate the caller's dict
        try:
            token = model.get("document_token")  # checked against the task's vocabulary when the model is built
            vocab = token + 1 if isinstance(token, int) and not isinstance(token, bool) and token >= 2 else 2
            probe = ModelConfig(vocab_size=vocab, seq_len=1, **model)
        except ValueError as e:
            raise ValueError(f"{c}.model: {e}") from None
        self.model = {k: getattr(probe, k) for k in model}
        if probe.tie_embeddings and "tie_embeddings" not in model:  # ModelConfig's default (FBT's), stored so the
            self.model["tie_embeddings"] = True  # run's record says its embeddings are tied

    def _check_schedule(self, c: str) -> None:
        """Parse the schedule; refuse a decoding-only one."""
        try:
            self.schedule = parse(self.schedule)
        except ValueError as e:
            raise ValueError(f"{c}.schedule: {e}") from None
        if self.schedule.to_dict()["schedule"] not in SCHEDULES:
            fail(f"{c}.schedule", self.schedule, f"must be a training schedule ({', '.join(SCHEDULES)} or a pass mix)")

    def model_config(self, vocab_size: int, seq_len: int) -> ModelConfig:
        """This run's ModelConfig, given the task's vocabulary and length."""
        return ModelConfig(vocab_size=vocab_size, seq_len=seq_len, **self.model)

    @property
    def max_passes(self) -> int:
        """The most passes (pass-loss columns) any step can make."""
        return self.schedule.max_passes

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON values."""
        data = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return {**data, "schedule": self.schedule.to_dict()}

    def replace(self, **changes: Any) -> TrainConfig:
        """A validated copy."""
        return dataclasses.replace(self, **changes)

    def trajectory_dict(self) -> dict[str, Any]:
        """The fields that determine the loss history."""
        return {k: v for k, v in self.to_dict().items() if k not in RUNTIME_FIELDS}
