"""Schedules by name: the string/JSON forms of the CLI, ``TrainConfig`` and checkpoints."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..validation import fail
from .pass_mix import PassMix
from .prefilled import Prefilled
from .values import Blockwise, FixedPoint, Interleaved, Multipass, Schedule, Sequential, Single

SCHEDULES = ("single", "sequential", "multipass", "interleaved", "blockwise", "fixed_point")
# a pass mix is multipass with a mix
VALUES: dict[str, type[Schedule]] = {c.name: c for c in (Single, Sequential, Multipass, Interleaved, Blockwise,
                                                          FixedPoint)}
KNOBS: dict[str, str] = {name: c.knob_name for name, c in VALUES.items() if c.knob_name is not None}


def parse(schedule: str | Schedule | dict[str, Any]) -> Schedule:
    """A ``Schedule`` from a value, its ``to_dict`` form or a name; an unknown key is refused, not ignored."""
    if isinstance(schedule, Schedule):
        return schedule
    if isinstance(schedule, str):
        if schedule not in VALUES:
            fail("schedule", schedule, f"must be one of {SCHEDULES}")
        return VALUES[schedule]()
    if not isinstance(schedule, dict):
        fail("schedule", schedule, "must be a Schedule, its JSON form or a name")
    spec = dict(schedule)
    name = spec.pop("schedule", "single")
    if name == Prefilled.name:
        unknown = sorted(set(spec) - {"prefill", "then", "prompt_len", "suffix"})
        if unknown:
            fail("schedule", schedule, f"prefilled takes no {unknown}")
        return Prefilled(parse(spec.get("prefill", {"schedule": "single"})),
                         parse(spec.get("then", {"schedule": "sequential"})), spec.get("prompt_len"),
                         spec.get("suffix"))
    if name not in VALUES:
        fail("schedule", schedule, f"must name one of {SCHEDULES}")
    own = {f.name for f in dataclasses.fields(VALUES[name])} | ({"pass_mix"} if name == "multipass" else set())
    unknown = sorted(set(spec) - own)
    if unknown:
        fail("schedule", schedule, f"{name} takes {sorted(own) or 'no parameter'}, not {unknown}")
    if spec.get("pass_mix") is not None:
        return PassMix.of(spec["pass_mix"], spec.get("aux_weight", 1.0), spec.get("passes"))
    spec.pop("pass_mix", None)
    return VALUES[name](**spec)
