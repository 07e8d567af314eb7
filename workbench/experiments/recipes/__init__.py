"""The recipes, one module each; ``RECIPES`` in the order RESULTS.md shows them. Their pre-registered texts are
in ``preregistered.toml``."""

from __future__ import annotations

from ..core import Recipe
from . import (
               causal_use,
               crosses,
               fbt_fixed_point_text,
               fbt_pass_mixes,
               fbt_pass_mixes_registers,
               fbt_prefill_gain,
               fbt_regimes,
               fbt_text,
               fixed_point_study,
               gate_control,
               injection_ablation,
               layer0_probes,
               lrt_memory_sanity,
               lrt_vs_baseline,
               memory_source,
               reasoning_traces,
               schedules,
               source_layer,
)

RECIPES: dict[str, Recipe] = {m.RECIPE.name: m.RECIPE for m in (
    lrt_vs_baseline, schedules, source_layer, memory_source, injection_ablation, gate_control,
    fbt_text, fbt_regimes, fbt_prefill_gain, fbt_fixed_point_text, fbt_pass_mixes, fbt_pass_mixes_registers,
    layer0_probes, reasoning_traces, fixed_point_study,
    crosses, causal_use, lrt_memory_sanity)}
