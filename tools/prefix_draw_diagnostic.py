"""How much of FBT's prefix mix-in do the completion specimens at 8 and 32 lines need to pass their gate?

The ``layer0_probes`` completion FBT once drew one plain prefix per sequence for half the sequences, shared by
all its passes, and its answers broke after a few fused tokens on the long prompts (suffix1 accuracy 0.473 /
0.445, below the 0.95 competence check). The recipe now draws the prefix afresh in every pass
(``prefix_draw="pass"``) for half the sequences (``prefix_mixin=0.5``). This trains the same specimen (same
task mix, model, steps, seed) with the prefix drawn for every sequence in every pass (``prefix_mixin=1``) and
measures both on the same held-out gate prompts, side by side. A diagnostic, not a recipe: nothing here writes
to ``checkpoints/``.

    python tools/prefix_draw_diagnostic.py --out runs/prefix_draw     # resumable; 45 min on one core here
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from workbench.analysis.features import answer_correct
from workbench.checkpoint import load_checkpoint
from workbench.experiments import probe_specimens as P
from workbench.experiments.core import EVAL_SEED
from workbench.experiments.store import checkpoints_root
from workbench.train import train

TASK = "completion_tracking"


def variant(out: Path) -> torch.nn.Module:
    """The specimen's own config with the prefix drawn in every pass, trained (or resumed) under ``out``."""
    spec = next(s for s in P.build(1.0) if s.name == P.run_name(TASK, "fbt"))
    cfg = spec.train.replace(prefix_mixin=1.0, out_dir=str(out), checkpoint_every=100,
                             resume=(out / "checkpoint").is_dir(), progress=True)
    return train(cfg).model


def gates(models: dict[str, torch.nn.Module], n: int) -> pd.DataFrame:
    """Held-out answer accuracy per model, scratch length and condition, on one batch per length."""
    rows = []
    for scratch in P.SCRATCH:
        batch = P.gate_batch(TASK, scratch, EVAL_SEED, n)
        for name, model in models.items():
            for condition in ("standard", "suffix1", "suffix2", "suffix4"):
                rows.append({"model": name, "scratch": scratch, "condition": condition,
                             "accuracy": float(answer_correct(model, batch, condition).mean())})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/prefix_draw"))
    parser.add_argument("--n", type=int, default=P.GATE_N)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shipped = load_checkpoint(checkpoints_root() / "layer0_probes" / P.run_name(TASK, "fbt"))
    table = gates({"shipped (per pass, half)": shipped, "per pass, every sequence": variant(args.out)}, args.n)
    wide = table.pivot_table(index=["scratch", "condition"], columns="model", values="accuracy")
    print(f"{TASK} FBT answer accuracy, {args.n} held-out prompts per length (competence check: "
          f">= {P.COMPETENT} under suffix1)")
    print(wide.round(3).to_string())
    table.to_csv(args.out / "gates.csv", index=False)


if __name__ == "__main__":
    main()
