"""What an LRT model learned, per layer: the residual scales ``alpha_l`` / ``gamma_l`` and the mean local and
feedback gates on a batch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..model import GPT
from ..validation import check_tokens
from .cache import run_with_cache


def _check_lrt(model: GPT) -> None:
    if model.config.mechanism != "lrt":
        raise ValueError(f"model.config.mechanism={model.config.mechanism!r} is invalid: these statistics "
                         "read the LRT mechanism's gates and scales (mechanism='lrt')")


def lrt_gates(model: GPT, idx: torch.Tensor) -> pd.DataFrame:
    """Mean LRT gates per (layer, position) under the exact recurrence, over the batch and kv heads.

    ``gate_local`` scales the token's own key/value, ``gate_feedback`` the projected memory ``W^rec m_{t-1}``; both
    are ``2 sigmoid(W x[:C])``, 1 at init. Empty without the KV injection."""
    _check_lrt(model)
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
    """Per layer: ``alpha``, ``gamma`` (residual injection ``alpha x + gamma m``; NaN without it), the mean gates
    over positions > 0 (position 0 reads no memory; NaN without the KV injection), and ``source``: the block whose
    output becomes the memory."""
    _check_lrt(model)
    L = model.config.n_layer
    mech = model.mechanism
    residual = "residual" in model.config.lrt_inject
    frame = pd.DataFrame({"layer": np.arange(L),
                          "alpha": mech.alpha.detach().double().cpu().numpy() if residual else np.nan,
                          "gamma": mech.gamma.detach().double().cpu().numpy() if residual else np.nan,
                          "source": np.arange(L) == mech.source_layer % L})
    gates = lrt_gates(model, idx)
    means = gates[gates["position"] > 0].groupby("layer")[["gate_local", "gate_feedback"]].mean()
    return frame.join(means.reindex(frame["layer"]).reset_index(drop=True))
