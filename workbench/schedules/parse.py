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


def parse(schedule: str | Schedule | dict[str, Any], *, passes: int | None = None, subsets: int | None = None,
          block: int | None = None, aux_weight: float | None = None,
          pass_mix: dict[int, float] | None = None) -> Schedule:
    """A ``Schedule`` from its value, its JSON form (``{"schedule": "interleaved", "subsets": 2}``) or a
    name plus the keyword arguments that name uses (the CLI and ``TrainConfig`` form). A keyword left
    None takes the value's own default; keywords another schedule uses are ignored."""
    if isinstance(schedule, Schedule):
        return schedule
    if isinstance(schedule, dict):
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
        own = {KNOBS.get(name)} | ({"aux_weight"} if name in ("multipass", "fixed_point") else set()) \
            | ({"pass_mix", "passes"} if name == "multipass" else set())
        unknown = set(spec) - own - {"plain_prefix"}  # plain_prefix: a key old stored forms carry, unused
        if unknown:  # a knob of another schedule would be silently ignored: refused instead
            raise ValueError(f"schedule={schedule!r} is invalid: {name} takes "
                             f"{sorted(k for k in own if k) or 'no parameter'}, not {sorted(unknown)}")
        spec.pop("plain_prefix", None)
        return parse(name, **{"passes": passes, "subsets": subsets, "block": block, "aux_weight": aux_weight,
                              "pass_mix": pass_mix, **spec})
    if schedule not in VALUES:
        raise ValueError(f"schedule={schedule!r} is invalid: must be one of {SCHEDULES}")
    given = {"passes": passes, "subsets": subsets, "block": block, "aux_weight": aux_weight}
    if pass_mix and schedule == "multipass":
        return PassMix.of(pass_mix, 1.0 if aux_weight is None else aux_weight, passes)
    cls = VALUES[schedule]
    return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if given.get(f.name) is not None})
