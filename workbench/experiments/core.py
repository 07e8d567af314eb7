"""What a recipe is: claim, runs, gates and rule, stated before training. A failed gate makes the verdict ``not
tested``: a model that did not learn its task says nothing."""

from __future__ import annotations

import functools
import math
import operator
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .. import schedules, tasks
from ..model import GPT
from ..train import TrainConfig
from ..validation import fail

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EVAL_SEED = 1234  # the fixed held-out batch every recorded metric is measured on
_OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le, ">": operator.gt,
                                                   "<": operator.lt}
KINDS = ("paper", "sanity", "exploratory")  # a paper claim; a check that the machinery works; ours, no claim
PREREGISTERED_FILE = Path(__file__).with_name("recipes") / "preregistered.toml"


@functools.cache
def _preregistrations() -> dict[str, dict[str, str]]:
    with PREREGISTERED_FILE.open("rb") as f:
        return tomllib.load(f)


def preregistered(name: str, **values: Any) -> dict[str, str]:
    """The texts of ``name``'s table in ``recipes/preregistered.toml`` (frozen once trained: see its header), each
    ``{NAME}`` filled from ``values``: the code's own constants, so text and decision cannot disagree."""
    tables = _preregistrations()
    if name not in tables:
        fail("name", name, f"must be a table of {PREREGISTERED_FILE.name}, one of {sorted(tables)}")
    texts = {}
    for key, template in tables[name].items():
        try:
            texts[key] = template.format(**values)
        except (KeyError, IndexError, AttributeError) as e:
            raise ValueError(f"preregistered({name!r}): [{name}] {key} needs a value for {e}") from e
    return texts


@dataclass(frozen=True)
class Gate:
    """A competence precondition, checked before the verdict."""

    name: str  # short id, e.g. "completion_tracking_fbt answer accuracy"
    quantity: str  # what is measured, in words (schedule, split, sample)
    op: str  # ">=", "<=", ">" or "<"
    threshold: float

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"Gate {self.name!r}: op={self.op!r} is invalid: must be one of {sorted(_OPS)}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"Gate {self.name!r}: threshold={self.threshold!r} is invalid: must be finite")

    def check(self, value: float) -> GateResult:
        return GateResult(self, float(value))

    def describe(self) -> str:
        return f"{self.name} {self.op} {self.threshold:g} ({self.quantity})"


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    value: float

    @property
    def passed(self) -> bool:
        """A NaN (nothing measured) never passes."""
        return math.isfinite(self.value) and _OPS[self.gate.op](self.value, self.gate.threshold)

    def describe(self) -> str:
        return f"{self.gate.name} = {self.value:.4g} (needs {self.gate.op} {self.gate.threshold:g})"


@dataclass(frozen=True)
class Extension:
    """The rule applied beyond the paper's claim: its own row, never the verdict."""

    name: str  # what the claim is extended to, e.g. "multi_register (FBT)"
    verdict: str
    number: str  # the numbers the verdict reads, in words


@dataclass(frozen=True)
class Finding:
    """A recipe's result said plainly, computed from its stored results."""

    ours: str
    sentence: str


def failed_gates(summary: Mapping[str, Any]) -> str:
    """The summary's failed gates, in words."""
    return "; ".join(f"{g['name']} ({g['quantity']}) was "
                     f"{'not measured' if g['value'] is None else format(g['value'], '.3g')} where it needs "
                     f"{g['op']} {g['threshold']:g}" for g in summary.get("gates", ()) if not g["passed"])


def lead(summary: Mapping[str, Any]) -> str:
    """A finding's opening when a gate failed, so no number after it reads as a result."""
    verdict, failed = summary["verdict"], failed_gates(summary)
    if not verdict.startswith("not tested"):
        return ""
    # no failed gate: the design's own check (every competence check passed)
    return f"Not tested: {failed}, so no verdict is drawn." if failed else verdict[0].upper() + verdict[1:] + "."


def short_verdict(verdict: str) -> str:
    """"not tested" for a verdict that is, wholly or in every task's part."""
    untested = verdict.startswith("not tested") or all(": not tested" in part for part in verdict.split(";"))
    return "not tested" if untested else verdict


def default_finding(summary: Mapping[str, Any], results: pd.DataFrame) -> Finding:
    """A recipe's finding when it defines none: the failed gates, or its verdict."""
    return Finding(short_verdict(summary["verdict"]), lead(summary) or f"Verdict: {summary['verdict']}.")


EVAL_SIZE = 256  # held-out examples of a run's recorded evaluation


@dataclass
class RunSpec:
    """One trained model of a recipe and its fixed recorded evaluation."""

    name: str  # directory under checkpoints/RECIPE/
    train: TrainConfig
    # the schedule the recorded metric is measured under: a Schedule value (its JSON form is parsed once, here)
    eval_schedule: schedules.Schedule = field(default_factory=schedules.Single)
    eval_size: int = EVAL_SIZE
    # the task setting the recorded metric is measured on (None: the one it trains on); a run trained on a mix of
    # lengths is scored on the length its recipe asks about
    eval_task_params: dict | None = None

    def __post_init__(self) -> None:
        self.eval_schedule = schedules.parse(self.eval_schedule)
        # curve evaluations never use more examples than the recorded one (at smoke scale they'd outcost training)
        if self.train.eval_size > self.eval_size:
            self.train = self.train.replace(eval_size=self.eval_size)

    def eval_task(self) -> tasks.Task:
        return tasks.get(self.train.task, **(self.train.task_params if self.eval_task_params is None
                                             else self.eval_task_params))

    def eval_batch(self) -> tasks.Batch:
        return self.eval_task().sample(self.eval_size, EVAL_SEED, "val")


@dataclass
class Context:
    """What a recipe's analysis gets."""

    recipe: Recipe
    runs: dict[str, RunSpec]
    models: dict[str, GPT]
    per_example: dict[str, pd.DataFrame]
    out: Any  # Path of checkpoints/RECIPE
    scale: float
    jobs: int = 1  # worker processes an analysis may use for independent work (``reproduce(jobs=...)``)


@dataclass
class Outcome:
    """A recipe's result."""

    table: pd.DataFrame
    draw: Callable[[str], Any]  # gated verdict -> matplotlib Figure: a title that states a verdict states the gated one
    number: str  # our number with its interval, in words
    verdict: str  # what the decision rule says, before the gates are applied
    gate_values: dict[str, float] = field(default_factory=dict)  # Gate.name -> measured value
    chance: str = ""  # the chance floor / unigram line, as measured, in words
    extra: dict[str, Any] = field(default_factory=dict)  # anything else summary.json should keep
    extensions: list[Extension] = field(default_factory=list)  # the rule beyond the claim, each its own row


@dataclass
class Recipe:
    name: str
    claim: str  # the paper's claim, quoting its number
    setting: str  # our setting, in one sentence
    build: Callable[[float], list[RunSpec]]
    analyze: Callable[[Context], Outcome]
    gates: tuple[Gate, ...] = ()  # preconditions, stated before training
    rule: str = ""  # the decision rule: which interval means which verdict
    chance: str = ""  # the chance floor / baseline every number is read against, in words
    caveat: str = ""  # what the reader must know to read our number (no numbers here: those are computed)
    kind: str = "paper"  # one of KINDS
    reads: tuple[str, ...] = ()  # recipes whose trained models this one analyses (it may train none of its own)
    paper: str = ""  # the claim in a few words, with the paper's own number ("" for ours): a citation, not a result
    # (summary.json, results.csv) -> Finding: our number and one plain sentence, computed (default_finding if None)
    finding: Callable[[Mapping[str, Any], pd.DataFrame], Finding] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Recipe {self.name!r}: kind={self.kind!r} is invalid: must be one of {KINDS}")
        names = [g.name for g in self.gates]
        if len(set(names)) != len(names):
            raise ValueError(f"Recipe {self.name!r}: gate names must be unique, got {names}")
        if self.kind == "paper" and not (self.gates and self.rule):
            raise ValueError(f"Recipe {self.name!r}: a paper claim needs gates and a decision rule")


def apply_gates(recipe: Recipe, measured: Mapping[str, float], verdict: str) -> tuple[list[GateResult], str]:
    """The gates checked, and the verdict they leave."""
    missing = [g.name for g in recipe.gates if g.name not in measured]
    if missing:
        raise ValueError(f"recipe {recipe.name!r}: no value measured for gates {missing}")
    results = [g.check(measured[g.name]) for g in recipe.gates]
    failed = [r for r in results if not r.passed]
    if failed:
        return results, "not tested: " + "; ".join(r.describe() for r in failed)
    return results, verdict
