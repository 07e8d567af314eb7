"""What an LRT model learned per layer: residual scales ``alpha_l`` / ``gamma_l`` and mean gates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..model import GPT
from ..validation import check_tokens, fail
from .cache import run_with_cache


def lrt_gates(model: GPT, idx: torch.Tensor) -> pd.DataFrame:
    """Mean LRT gates (``2 sigmoid(.)``, 1 at init) per (layer, position); empty without the KV injection."""
    if model.config.mechanism != "lrt":
        fail("model.config.mechanism", model.config.mechanism, "needs 'lrt'")
    check_tokens(model.config.vocab_size, idx)
    if "kv" not in model.config.lrt_inject:
        return pd.DataFrame(columns=["layer", "position", "gate_local", "gate_feedback"])
    _, cache = run_with_cache(model, idx, "sequential", names_filter=lambda name: name.endswith("hook_gate"))
    frames = []
    for layer in range(model.config.n_layer):
        gates = cache[f"blocks.{layer}.attn.hook_gate"].double().mean(dim=(0, 3, 4))  # (T, 2)
        frames.append(pd.DataFrame({"layer": layer, "position": np.arange(idx.size(1)),
                                    "gate_local": gates[:, 0].cpu().numpy(),
                                    "gate_feedback": gates[:, 1].cpu().numpy()}))
    return pd.concat(frames, ignore_index=True)


def lrt_layer_stats(model: GPT, idx: torch.Tensor) -> pd.DataFrame:
    """Per layer: ``alpha``, ``gamma`` and the mean gates over positions > 0 (NaN where not injected)."""
    gates = lrt_gates(model, idx)  # first: it checks the model and idx
    L = model.config.n_layer
    mech = model.mechanism
    residual = "residual" in model.config.lrt_inject
    frame = pd.DataFrame({"layer": np.arange(L),
                          "alpha": mech.alpha.detach().double().cpu().numpy() if residual else np.nan,
                          "gamma": mech.gamma.detach().double().cpu().numpy() if residual else np.nan,
                          "source": np.arange(L) == mech.source_layer % L})
    means = gates[gates["position"] > 0].groupby("layer")[["gate_local", "gate_feedback"]].mean()
    return frame.join(means.reindex(frame["layer"]).reset_index(drop=True))
