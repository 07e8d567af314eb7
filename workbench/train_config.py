"""TrainConfig: everything that determines a training run, validated, with an exact JSON round trip.

A run directory stores it as ``train_config.json``; ``--resume`` refuses to continue a run under a
different config (outside ``RUNTIME_FIELDS``), because the loss history would silently stop being
the history of one experiment.
"""

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
# Fields that may change between an interrupted run and its resumption: they do not change the
# trajectory (where it runs, whether a bar is drawn, when a budget stops it).
# how often a run saves does not change its history (a resumed run is the same run, bit for bit): runtime too
# out_dir is where a run is, not what it is: a run moved (or resumed from another working directory) is the same run
RUNTIME_FIELDS = ("out_dir", "resume", "device", "progress", "budget_flops", "compile", "overwrite",
                  "checkpoint_every")
# Set from the task, never by the user.
TASK_MODEL_FIELDS = ("vocab_size", "seq_len")


@dataclass
class TrainConfig(JSONMixin):
    """One training run: task, model, schedule, optimiser, evaluation, checkpoints, budget.

    Every field is checked when the config is made: a bad value raises a ``ValueError`` naming the
    field and its allowed range. The defaults train a small baseline on ``running_sum`` for 200 steps
    on a CPU. Fields in ``RUNTIME_FIELDS`` may differ when a run resumes; every other field is part
    of the run's identity (``trajectory_dict``).

    Attributes:
        task: A task name from ``workbench.tasks.names()`` (default ``"running_sum"``: the running sum mod p,
            the simplest task whose latent state changes at every token). It sets the model's ``vocab_size``
            and ``seq_len``.
        task_params: Keyword arguments of ``tasks.get`` for the task (a dict with string keys), e.g.
            ``{"p": 5, "length": 8}``; empty means the task's defaults.
        model: ``ModelConfig`` fields as a dict, except ``vocab_size`` and ``seq_len`` (the task's).
            Checked through ``ModelConfig`` at once and stored as it normalised them; empty means
            ``ModelConfig``'s defaults.
        schedule: How a training batch is computed: a training schedule value (``Single()``, ``Sequential()``,
            ``Multipass(K, aux_weight)``, ``Interleaved(S)``, ``Blockwise(B)``, ``FixedPoint(K, aux_weight, tol)``
            or FBT's ``PassMix.of({1: .75, 2: .22, 3: .03}, aux_weight, passes)``, one depth drawn per step), its
            JSON form (``to_dict``, as ``train_config.json`` stores it) or a bare name for its defaults.
            ``Single()`` (default) reads no memory: the baseline's training. A multi-pass objective is
            ``NTP_1 + aux_weight * mean_{k>=2} NTP_k``.
        feedback_start: Fraction of the steps trained single-pass before the schedule starts, a float in
            [0, 1) (progressive training); 0 (default) uses the schedule from the first step.
        prefix_mixin: Fraction of sequences given a random plain prefix (positions that read no memory) in
            passes after the first, a float in [0, 1]; FBT trains with it so a model also works from a
            plain prompt. 0 (default): none.
        prefix_draw: ``"sequence"`` (default): one prefix per sequence, shared by its passes; ``"pass"``: a
            fresh draw in every pass after the first (multipass and pass mixes only; the FBT paper's wording).
        steps: Optimiser steps, an int >= 1.
        batch_size: Sequences per optimiser step over all processes and micro-batches, an int >= 1.
        grad_accum: Micro-batches per process per step, an int in [1, batch_size] that divides it: a memory
            knob, the maths does not change.
        optimizer: ``"muon"`` (default, as nanochat: Muon for the hidden matrices, AdamW for the rest) or
            ``"adamw"`` (AdamW for everything).
        lr: AdamW learning rate (embedding, readout, scalars; everything under ``"adamw"``), in (0, 10].
        lrt_gamma_lr: LRT's residual-injection scale gamma in its own AdamW group at this rate, in (0, 10],
            as the reference code trains it (0.5); needs ``mechanism="lrt"`` with residual injection.
            None (default): gamma stays in the shared group at ``lr`` (the workbench's original treatment).
        lrt_alpha_lr: The same for LRT's layer scale alpha (the reference code: 0.005).
        matrix_lr: Muon learning rate of the hidden matrices, in (0, 10].
        weight_decay: Decoupled weight decay of the hidden matrices, in [0, 10]; 0 (default) for short runs.
        lr_schedule: After the warmup: ``"wsd"`` (default: warmup-stable-decay, flat then a linear decay),
            ``"cosine"`` or ``"constant"`` (the recipes at matched compute use it: their arms run different
            step counts, and a point on a held-out curve then does not depend on where the run stops).
        warmup_steps: Linear warmup length, an int in [0, steps]; 0 (default): none.
        decay_frac: ``"wsd"``: fraction of the steps spent decaying at the end, a float in [0, 1].
        min_lr_frac: ``"wsd"`` and ``"cosine"``: final learning rate as a fraction of the peak, in [0, 1].
        grad_clip: Largest global gradient norm, a float >= 0; 0 disables clipping (the norm is still
            logged).
        seed: An int >= 0 from which initialisation, data, pass mix, prefixes and jitter all derive, so a
            run is reproducible from its config.
        init_from: A saved checkpoint directory whose weights start the run instead of a fresh
            initialisation (fine-tuning; its model config must be this run's); a relative path is read from
            the working directory. None (default): a fresh initialisation.
        eval_every: Evaluate on held-out batches every N steps, an int >= 0; 0 (default): only at the end.
        eval_size: Held-out sequences per evaluation (``split="val"``, seed ``eval_seed``), an int >= 1.
        eval_seed: Seed of the held-out sequences, an int >= 0; fixed, so evaluations compare across runs.
        log_every: One history row every N steps (and at every evaluation and the last step), an int >= 1.
        checkpoint_every: Save a checkpoint every N steps, an int >= 0; 0 (default): only at the end.
        budget_flops: Stop before the step that would exceed this many training FLOPs (a float > 0), for
            comparisons at matched compute; None (default): run every step.
        out_dir: The run directory (history, config, checkpoints); None (default): nothing is written.
        resume: Continue from ``out_dir``'s checkpoint if there is one (needs ``out_dir``); refused when the
            stored config differs outside ``RUNTIME_FIELDS``.
        device: ``"auto"`` (default: CUDA when present), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        progress: Draw a tqdm progress bar (default True).
        compile: Run each schedule under ``torch.compile`` (default False): the same maths, float rounding
            differs slightly.
        overwrite: Let a fresh run replace history, config or figure files in ``out_dir`` that no run of
            ours wrote (default False, so a typo in ``out_dir`` cannot clobber other files).
    """

    # --- data ---
    task: str = "running_sum"  # a name from workbench.tasks.names()
    task_params: dict[str, Any] = field(default_factory=dict)  # keyword arguments of tasks.get
    # --- model: ModelConfig fields except vocab_size and seq_len, which the task sets ---
    model: dict[str, Any] = field(default_factory=dict)
    # --- schedule ---
    # a training schedule value (its JSON form or a bare name are read into one)
    schedule: Schedule = field(default_factory=Single)
    feedback_start: float = 0.0  # fraction of the steps trained single-pass before the schedule (progressive)
    prefix_mixin: float = 0.0  # fraction of sequences given a random plain prefix in passes after the first
    # "sequence": one prefix per sequence, shared by its passes; "pass": a fresh draw in every pass after the
    # first (multipass only; the FBT paper's wording, arXiv 2608.08888)
    prefix_draw: str = "sequence"
    # --- optimisation ---
    steps: int = 200  # optimiser steps
    batch_size: int = 32  # sequences per optimiser step, over all processes and micro-batches
    grad_accum: int = 1  # micro-batches per process per step (memory knob: the maths does not change)
    optimizer: str = "muon"  # "muon": Muon for hidden matrices + AdamW for the rest; "adamw": AdamW for all
    lr: float = 3e-3  # AdamW learning rate (embedding, readout, scalars; everything when optimizer="adamw")
    # LRT injection scales in their own AdamW groups, as the reference code trains them (gamma 0.5, alpha
    # 0.005); None keeps a scale in the shared AdamW group at ``lr`` (the workbench's original treatment)
    lrt_gamma_lr: float | None = None
    lrt_alpha_lr: float | None = None
    matrix_lr: float = 0.02  # Muon learning rate for the hidden matrices
    weight_decay: float = 0.0  # decoupled weight decay of the hidden matrices
    lr_schedule: str = "wsd"  # "wsd" (warmup-stable-decay), "cosine" or "constant", after the warmup
    warmup_steps: int = 0  # linear warmup length
    decay_frac: float = 0.2  # wsd: fraction of the steps spent decaying linearly at the end
    min_lr_frac: float = 0.0  # wsd / cosine: final learning rate as a fraction of the peak
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping (the norm is still logged)
    seed: int = 0  # initialisation, data, pass mix, prefixes and jitter all derive from it
    # a saved checkpoint directory whose weights start the run instead of a fresh initialisation (fine-tuning;
    # its model config must be this run's); a relative path is read from the working directory
    init_from: str | None = None
    # --- evaluation, logging, checkpoints ---
    eval_every: int = 0  # evaluate on held-out batches every N steps; 0 = only at the end
    eval_size: int = 256  # held-out sequences (split="val", seed=eval_seed)
    eval_seed: int = 0
    log_every: int = 10  # one history row every N steps (and at every evaluation and the last step)
    checkpoint_every: int = 0  # checkpoint every N steps; 0 = only at the end
    budget_flops: float | None = None  # stop before the step that would exceed this many training FLOPs
    out_dir: str | None = None  # run directory; None = nothing written
    # --- runtime ---
    resume: bool = False  # continue from out_dir/checkpoint if there is one
    device: str = "auto"  # "auto" (CUDA when present), "cpu", "cuda" or "cuda:N"
    progress: bool = True  # draw a tqdm progress bar
    compile: bool = False  # run each schedule under torch.compile (same maths; float rounding differs slightly)
    overwrite: bool = False  # let a fresh run replace history/config/figure files in out_dir that no run of ours wrote

    def __post_init__(self) -> None:
        c = "TrainConfig"
        self._plain_numbers()
        if not isinstance(self.task, str) or not self.task:
            fail(f"{c}.task", self.task, "must be a task name (workbench.tasks.names())")
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
            fail(f"{c}.prefix_draw", self.prefix_draw, f"needs a multipass schedule or pass mix (whose passes "
                 f"read memory one after another), not {self.schedule.label!r}")
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
                    fail(f"{c}.{name}", getattr(self, name), "needs model mechanism='lrt' with residual injection "
                          "(the scales it trains); use None otherwise")
        check_float(f"{c}.weight_decay", self.weight_decay, 0.0, 10.0)
        check_choice(f"{c}.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_int(f"{c}.warmup_steps", self.warmup_steps, 0, self.steps)
        check_float(f"{c}.decay_frac", self.decay_frac, 0.0, 1.0)
        check_float(f"{c}.min_lr_frac", self.min_lr_frac, 0.0, 1.0)
        check_float(f"{c}.grad_clip", self.grad_clip, 0.0)
        check_int(f"{c}.seed", self.seed, 0)
        if self.init_from is not None and (not isinstance(self.init_from, str) or not self.init_from):
            fail(f"{c}.init_from", self.init_from, "must be a checkpoint directory path string or None")
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
            fail(f"{c}.resume", self.resume, "needs out_dir (the run directory to resume from)")
        if not isinstance(self.device, str) or not (self.device in DEVICES
                                                    or self.device.startswith("cuda:")):
            fail(f"{c}.device", self.device, f"must be one of {DEVICES} or 'cuda:N'")

    def _check_model(self, c: str) -> None:
        """Validate through ModelConfig now (placeholder vocabulary) and store the values it normalised."""
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
        """The schedule as a value (from its JSON form or name), and one a training run can use: no decoding value."""
        try:
            self.schedule = parse(self.schedule)
        except ValueError as e:
            raise ValueError(f"{c}.schedule: {e}") from None
        if self.schedule.to_dict()["schedule"] not in SCHEDULES:
            fail(f"{c}.schedule", self.schedule, f"must be a training schedule ({', '.join(SCHEDULES)} or a pass mix)")

    def model_config(self, vocab_size: int, seq_len: int) -> ModelConfig:
        """The ModelConfig of this run, given the task's vocabulary and sequence length."""
        return ModelConfig(vocab_size=vocab_size, seq_len=seq_len, **self.model)

    @property
    def max_passes(self) -> int:
        """The most passes (pass-loss columns) any step of this run can make."""
        return self.schedule.max_passes

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON values, the schedule in its JSON form."""
        data = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return {**data, "schedule": self.schedule.to_dict()}

    def replace(self, **changes: Any) -> TrainConfig:
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def trajectory_dict(self) -> dict[str, Any]:
        """The fields that determine the loss history (everything but ``RUNTIME_FIELDS``)."""
        return {k: v for k, v in self.to_dict().items() if k not in RUNTIME_FIELDS}
