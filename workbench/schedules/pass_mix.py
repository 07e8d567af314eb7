"""FBT's training sampler: a pass count drawn per batch from a mix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from ..kv_cache import DecodeCache
from ..model import GPT
from ..validation import MAX_COUNT, check_float, check_int, fail
from .output import ScheduleOutput
from .values import Multipass, Schedule


def _plain(value: Any) -> Any:
    if isinstance(value, str) and value.isdigit() and str(int(value)) == value:
        return int(value)
    return value.item() if isinstance(value, np.generic) else value


@dataclass(frozen=True)
class PassMix(Schedule):
    """Each batch draws its pass count from ``mix``; evaluates ``passes`` deep."""

    mix: tuple[tuple[int, float], ...] = ((1, 0.75), (2, 0.22), (3, 0.03))
    aux_weight: float = 1.0
    passes: int | None = None  # the depth it runs at; None: the deepest of the mix
    name: ClassVar[str] = "pass_mix"

    def __post_init__(self) -> None:
        if not isinstance(self.mix, tuple):
            fail("mix", self.mix, "must be a tuple of (passes, probability)")
        for k, p in self.mix:
            check_int("mix pass count", k, 1, MAX_COUNT)
            check_float(f"mix probability of {k} passes", p, 0.0, 1.0)
        if not self.mix or abs(sum(p for _, p in self.mix) - 1) > 1e-6:
            fail("mix", self.mix, "probabilities must sum to 1")
        check_float("aux_weight", self.aux_weight, 0.0, 1e6)
        if self.passes is None:
            object.__setattr__(self, "passes", max(k for k, _ in self.mix))
        check_int("passes", self.passes, 1, MAX_COUNT)

    @classmethod
    def of(cls, mix: dict[int, float], aux_weight: float = 1.0, passes: int | None = None) -> PassMix:
        """From ``{passes: probability}``; 1.5 passes is refused, not rounded."""
        if not isinstance(mix, dict):
            fail("mix", mix, "must be a dict {passes: probability}")
        return cls(tuple(sorted((_plain(k), _plain(p)) for k, p in mix.items())),
                   aux_weight, passes)

    @property
    def deepest(self) -> Multipass:
        return Multipass(max(k for k, _ in self.mix), self.aux_weight)

    can_prefill: ClassVar[bool] = True

    def draw(self, rng: np.random.Generator) -> Multipass:
        """One batch's schedule, its depth drawn from the mix."""
        passes = int(rng.choice([k for k, _ in self.mix], p=[p for _, p in self.mix]))
        return Multipass(passes, self.aux_weight)

    @property
    def evaluated(self) -> Multipass:
        """The multipass it evaluates as."""
        return Multipass(self.passes, self.aux_weight)

    def run(self, model: GPT, idx: torch.Tensor, plain_prefix: int | torch.Tensor = 0) -> ScheduleOutput:
        return self.evaluated.run(model, idx, plain_prefix)

    def prefill(self, model: GPT, idx: torch.Tensor, cache: DecodeCache) -> ScheduleOutput:
        return self.evaluated.prefill(model, idx, cache)

    @property
    def jacobi_passes(self) -> int:
        return self.passes

    def final_passes(self, passes: int = 1) -> list[int]:
        return [passes]

    def pass_equivalents(self) -> float:
        return float(sum(k * p for k, p in self.mix))

    @property
    def max_passes(self) -> int:
        return self.deepest.passes  # batches train at most this deep

    @property
    def label(self) -> str:
        return "pass mix " + "/".join(f"{round(100 * p):g}" for _, p in self.mix)

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": "multipass", "pass_mix": {k: p for k, p in self.mix}, "passes": self.passes,
                **({} if self.aux_weight == 1.0 else {"aux_weight": self.aux_weight})}


