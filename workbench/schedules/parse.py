"""Schedules by name: the string / JSON forms the CLI, ``TrainConfig`` and checkpoints use, read into values."""

from __future__ import annotations

import dataclasses
from typing import Any

from .pass_mix import PassMix
from .prefilled import Prefilled
from .values import Blockwise, FixedPoint, Interleaved, Multipass, Schedule, Sequential, Single

SCHEDULES = ("single", "sequential", "multipass", "interleaved", "blockwise", "fixed_point")
# every schedule by name (a pass mix is a multipass schedule with a mix); each class knows its own knob
VALUES: dict[str, type[Schedule]] = {c.name: c for c in (Single, Sequential, Multipass, Interleaved, Blockwise,
                                                          FixedPoint)}
KNOBS: dict[str, str] = {name: c.knob_name for name, c in VALUES.items() if c.knob_name is not None}


def parse(schedule: str | Schedule | dict[str, Any]) -> Schedule:
    """A ``Schedule`` from its value, its JSON form (``to_dict``) or a bare name for its defaults. A key the named
    schedule does not have is refused, not ignored."""
    if isinstance(schedule, Schedule):
        return schedule
    if isinstance(schedule, str):
        if schedule not in VALUES:
            raise ValueError(f"schedule={schedule!r} is invalid: must be one of {SCHEDULES}")
        return VALUES[schedule]()
    if not isinstance(schedule, dict):
        raise ValueError(f"schedule={schedule!r} is invalid: must be a Schedule value, its JSON form or a name")
    spec = dict(schedule)
    name = spec.pop("schedule", "single")
    if name == Prefilled.name:
        unknown = sorted(set(spec) - {"prefill", "then", "prompt_len", "suffix"})
        if unknown:
            raise ValueError(f"schedule={schedule!r} is invalid: prefilled takes prefill, then, prompt_len and "
                             f"suffix, not {unknown}")
        return Prefilled(parse(spec.get("prefill", {"schedule": "single"})),
                         parse(spec.get("then", {"schedule": "sequential"})), spec.get("prompt_len"),
                         spec.get("suffix"))
    if name not in VALUES:
        raise ValueError(f"schedule={schedule!r} is invalid: must name one of {SCHEDULES}")
    own = {f.name for f in dataclasses.fields(VALUES[name])} | ({"pass_mix"} if name == "multipass" else set())
    unknown = sorted(set(spec) - own)
    if unknown:
        raise ValueError(f"schedule={schedule!r} is invalid: {name} takes {sorted(own) or 'no parameter'}, "
                         f"not {unknown}")
    if spec.get("pass_mix") is not None:
        return PassMix.of(spec["pass_mix"], spec.get("aux_weight", 1.0), spec.get("passes"))
    spec.pop("pass_mix", None)
    return VALUES[name](**spec)
