"""Probe conditions: the prefill a probe reads features under, named the way its tables name it."""

from __future__ import annotations

import re

from .prefilled import Prefilled
from .values import Multipass, Schedule, Sequential, Single

CONDITION_FORMS = ("standard", "sequential", "suffixK (K >= 1 fused tokens, e.g. suffix1)",
                   "multipassK (K >= 1 Jacobi passes, e.g. multipass3)")
_CONDITION = re.compile(r"(standard|sequential)|(suffix|multipass)([1-9]\d*)")


def condition(name: str | Schedule) -> Schedule:
    """A probe's prefill condition as a value: ``standard``, ``sequential``, ``multipassK`` or ``suffixK`` (a plain
    prefill, then the exact recurrence over the last K tokens up to the position read)."""
    if isinstance(name, Schedule):
        return name
    match = _CONDITION.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(f"conditions={name!r} is invalid: each condition must be a schedule value or one of the "
                         f"forms {', '.join(CONDITION_FORMS)}")
    if match.group(1):
        return Single() if match.group(1) == "standard" else Sequential()
    k = int(match.group(3))
    return Multipass(k) if match.group(2) == "multipass" else Prefilled(Single(), Sequential(), suffix=k)


def condition_name(value: str | Schedule) -> str:
    """How probe tables name a condition: the four named forms by their names, any other value by its label."""
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
