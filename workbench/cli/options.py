"""Argument types: each parses one flag's text or says, naming the value, what it must be."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import schedules


def _int_at_least(lo: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = lo - 1
        if value < lo:
            raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be an int >= {lo}")
        return value
    return parse


positive_int, non_negative_int = _int_at_least(1), _int_at_least(0)


def _finite(text: str, bound: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 or bound == ">= 0" and value == 0)):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be a finite number {bound}")
    return value


def finite_positive(text: str) -> float:
    """A finite number > 0."""
    return _finite(text, "> 0")


def finite_non_negative(text: str) -> float:
    """A finite number >= 0."""
    return _finite(text, ">= 0")


def check_out_dir(out: str, flag: str = "--out") -> None:
    """Before any compute: ``out`` must be, or be creatable as, a writable directory."""
    path = Path(out)
    if os.path.lexists(path) and not path.is_dir():
        raise ValueError(f"{flag} {out!r} is invalid: it exists and is not a directory")
    parent = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{flag} {out!r} is invalid: {parent} is not writable")


def parse_key_values(pairs: list[str] | None, flag: str) -> dict[str, Any]:
    """``key=value`` strings to a dict; values read as JSON when they parse."""
    parsed: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} {pair!r} is invalid: must be key=value")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if key in parsed and parsed[key] != value:
            raise ValueError(f"{flag} {key} is given twice with different values ({parsed[key]!r} and {value!r})")
        parsed[key] = value
    return parsed


def pass_mix_option(text: str) -> dict[str, float]:
    """``1:0.75,2:0.22,3:0.03`` to a dict (TrainConfig validates it)."""
    try:
        return {k.strip(): float(v) for k, v in (item.split(":") for item in text.split(","))}
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: must look like 1:0.75,2:0.22,3:0.03") from e


SCHEDULE_FORMS = "single, sequential, multipass:K, interleaved:S, blockwise:B, fixed_point:K or a JSON schedule"


def schedule_option(text: str) -> schedules.Schedule:
    """``--schedule``: a name, ``name:K`` (its one knob) or a JSON schedule."""
    try:
        if text.lstrip().startswith("{"):
            return schedules.parse(json.loads(text))
        name, sep, knob = text.partition(":")
        if not sep:
            return schedules.parse(name)
        if name not in schedules.KNOBS:
            raise ValueError(f"{name} has no knob")
        return schedules.parse({"schedule": name, schedules.KNOBS[name]: int(knob)})
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be {SCHEDULE_FORMS} ({e})") from None


def compare_schedule_option(text: str) -> schedules.Schedule | str:
    """``compare --schedule``: a schedule, or ``training`` (each run under its own)."""
    return text if text == "training" else schedule_option(text)


def device_option(text: str) -> str:
    """``--device``: auto, cpu, cuda or cuda:N."""
    index = text.removeprefix("cuda:")
    if text not in ("auto", "cpu", "cuda") and not (text.startswith("cuda:") and index.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be auto, cpu, cuda or cuda:N")
    return text


def task_params_option(text: str) -> dict[str, Any]:
    """``--task-params``: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be a JSON object")
    return value
