"""Probe conditions: the prefill a probe reads features under."""

from __future__ import annotations

import re

from ..validation import fail
from .prefilled import Prefilled
from .values import Multipass, Schedule, Sequential, Single

CONDITION_FORMS = ("standard", "sequential", "suffixK (K >= 1 fused tokens, e.g. suffix1)",
                   "multipassK (K >= 1 Jacobi passes, e.g. multipass3)")
_CONDITION = re.compile(r"(standard|sequential)|(suffix|multipass)([1-9]\d*)")


def condition(name: str | Schedule) -> Schedule:
    """A probe condition as a value; ``suffixK``: plain prefill, then exact recurrence over the last K tokens."""
    if isinstance(name, Schedule):
        return name
    match = _CONDITION.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        fail("conditions", name, f"must be a schedule or one of {', '.join(CONDITION_FORMS)}")
    if match.group(1):
        return Single() if match.group(1) == "standard" else Sequential()
    k = int(match.group(3))
    return Multipass(k) if match.group(2) == "multipass" else Prefilled(Single(), Sequential(), suffix=k)


def condition_name(value: str | Schedule) -> str:
    """How probe tables name a condition: a named form, else the value's label."""
    value = condition(value)
    if value == Single():
        return "standard"
    if value == Sequential():
        return "sequential"
    if isinstance(value, Multipass) and value == Multipass(value.passes):
        return f"multipass{value.passes}"
    if isinstance(value, Prefilled) and value.suffix is not None and value == Prefilled(suffix=value.suffix):
        return f"suffix{value.suffix}"
    return value.label
