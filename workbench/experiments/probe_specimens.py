"""The probing specimens ``layer0_probes`` trains and ``causal_use`` intervenes on."""

from __future__ import annotations

from .. import tasks
from ..schedules import Interleaved, Multipass, PassMix, Single
from .common import FBT_MIX, config, eval_size, steps
from .core import EVAL_SEED, RunSpec

PROBE_TASKS = ("completion_tracking", "delayed_memory", "multi_register")

SCRATCH = (0, 8, 32)  # probed lengths, each with its own gate; the models train on all three at once

# Every batch holds one scratch length, drawn per batch (scratch_draw="batch"), and is padded only to
# its own length: a step costs what its length costs, so the 32-line contexts are affordable for all
# three tasks (drawn per group, nearly every batch would have been padded to 32 lines).
TRAIN_TASK = {"scratch_updates": list(SCRATCH), "scratch_draw": "batch"}

MODEL = {"n_layer": 4, "n_head": 2, "n_embd": 64}  # 4 layers: 5 residual depths for the profile

# FBT needs width: at 4x64 and 4x96 it did not learn completion_tracking in 800 steps (answer accuracy 0.77 / 0.84
# under a plain pass, below chance after a recurrent step) where 4x128 did; 120 keeps the recipe's weights
# under 15 MB.
FBT_MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 120, "mechanism": "fbt"}

LRT = {"mechanism": "lrt", "lrt_gamma_init": 0.1, "lrt_kv_init": "uniform"}  # the LRT reference treatment

ARM_MODELS = {"baseline": {**MODEL, "tie_embeddings": True}, "fbt": FBT_MODEL, "lrt": {**MODEL, **LRT}}

ARM_TRAINING = {"baseline": {},
                "fbt": {"schedule": PassMix.of(FBT_MIX, passes=2), "feedback_start": 0.2,
                        "prefix_mixin": 0.5, "prefix_draw": "pass"},  # FBT's 75/22/3 recipe
                "lrt": {"schedule": Interleaved(2), "lrt_gamma_lr": 0.5,
                        "lrt_alpha_lr": 0.005}}  # LRT's own training (the paper's interleaved passes)

ARMS = tuple(ARM_MODELS)

# FBT draws its plain prefix afresh in every pass (the paper's reading). Drawn once per sequence and shared by its
# passes (``prefix_draw="sequence"``), a plain prompt followed by fused tokens was trained in about 12 % of
# batches, and the completion specimens at 8 and 32 scratch lines, which decide the label right (0.938 / 0.934
# under a plain pass), broke at the answer word's 4th-5th character under one recurrent step (0.473 / 0.445).

# Training seeds per arm: two for FBT, whose specimens the paper's claim is about (a lift seen on one seed could
# be that seed's); one for the reference arms.
ARM_SEEDS = {"baseline": (0,), "fbt": (0, 1), "lrt": (0,)}

ARM_STEPS = {"baseline": 600, "fbt": 1000, "lrt": 400}

# Within the recipe's time budget: every arm learned delayed_memory by step 100-150 (training loss < 0.03), so that
# task gets a quarter of its arm's steps.
TASK_STEP_SHARE = {"delayed_memory": 0.25}

# The condition each arm's gate is measured under: the one its verdict reads (a baseline has no memory,
# so every condition is the plain pass for it).
GATE_CONDITION = {"baseline": "standard", "fbt": "suffix1", "lrt": "suffix1"}

TEXT_MODEL = {"n_layer": 4, "n_head": 2, "n_embd": 64, "mechanism": "fbt"}  # the paper's setting: text only

TEXT_TASK = {"seq_len": 160}  # covers the 0- and 8-scratch prompts (<= 144 bytes); 32 lines would need 456

TEXT_STEPS = 200

COMPETENT = 0.95  # held-out answer accuracy a specimen needs before it is probed

GATE_N = 512  # held-out examples per gate (a 0.95 gate has a ~1-point standard error there)


def run_name(task: str, arm: str, seed: int = 0) -> str:
    """A specimen's run name."""
    return f"{task}_{arm}" + (f"_s{seed}" if seed else "")


def specimen_label(arm: str, seed: int = 0) -> str:
    """An arm's label, naming seeds other than 0."""
    return arm + (f" seed {seed}" if seed else "")


def specimen_key(task: str, scratch: int, seed: int = 0) -> str:
    """A specimen's key, naming seeds other than 0."""
    return " ".join(p for p in (task, f"s{scratch}", f"seed {seed}" if seed else "") if p)


def probe_task(task: str, scratch: int, tokenizer: str = "ascii") -> tasks.Task:
    """The task at one scratch length, labelled where the paper probes."""
    return tasks.get(task, scratch_updates=scratch, label_at="answer", tokenizer=tokenizer)


def gate_batch(task: str, scratch: int, seed: int = EVAL_SEED, n: int = GATE_N) -> tasks.Batch:
    return probe_task(task, scratch).sample(n, seed, "val")

# each arm's recorded evaluation: its training's schedule
EVAL_SCHEDULE = {"baseline": Single(), "fbt": Multipass(2), "lrt": Interleaved(2)}


def arm_steps(task: str, arm: str, scale: float = 1.0) -> int:
    """Its arm's steps times its task's share."""
    return steps(ARM_STEPS[arm] * TASK_STEP_SHARE.get(task, 1.0), scale)


def build(scale: float) -> list[RunSpec]:
    runs = [RunSpec(run_name(task, arm, seed), config(task, ARM_MODELS[arm], arm_steps(task, arm, scale), seed,
                                                      TRAIN_TASK, **ARM_TRAINING[arm]), EVAL_SCHEDULE[arm],
                    eval_size(scale))
            for task in PROBE_TASKS for arm in ARMS for seed in ARM_SEEDS[arm]]
    runs.append(RunSpec("text_fbt", config("text", TEXT_MODEL, steps(TEXT_STEPS, scale), 0, TEXT_TASK,
                                           **ARM_TRAINING["fbt"]), EVAL_SCHEDULE["fbt"], eval_size(scale)))
    return runs
