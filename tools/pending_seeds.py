"""Train fbt_text's pre-registered seeds across sessions, keeping what is trained in the repository meanwhile.

``fbt_language.LONG_SEED_TARGET`` seeds of the paper's arm and its two baselines were decided before the seeds
past ``LONG_SEEDS`` trained. One such run costs 1.5-2.6 hours of a core on a slow machine, more than a session
has beside its other work, and a machine's ignored folders (``runs/``) may be gone at the next session. So the
finished runs and the last resumable checkpoint of each unfinished one travel in one tracked archive,
``checkpoints/fbt_text/pending_seeds.tar``, outside the recipe's run folders (nothing reads it but this tool),
until every pre-registered run is trained:

    python tools/pending_seeds.py train --jobs 2   # unpack what is missing here, train (resumable) until done
    python tools/pending_seeds.py pack             # the archive from what is trained so far (stop training first)
    python tools/pending_seeds.py land             # every run trained: into checkpoints/fbt_text/, archive gone

After ``land``, add the seeds to ``LONG_SEEDS`` and run ``python -m workbench reproduce fbt_text`` (it reuses
the landed runs and scores them).
"""

from __future__ import annotations

import argparse
import io
import shutil
import tarfile
from pathlib import Path

from workbench.experiments import fbt_language as lang
from workbench.experiments.common import EXACT, eval_size
from workbench.experiments.core import RunSpec
from workbench.experiments.pool import _train_saved, map_jobs
from workbench.experiments.recipes import fbt_text
from workbench.experiments.store import checkpoints_root
from workbench.files import write_bytes_atomic

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = checkpoints_root() / fbt_text.RECIPE.name / "pending_seeds.tar"
WORK = ROOT / "runs" / "pending_seeds"  # finished runs under WORK/fbt_text, the trainer's own under WORK/scratch
KEEP = ("checkpoint", "history.csv", "train_config.json")  # what a trainer's run directory needs to resume


def pending() -> list[RunSpec]:
    """The pre-registered runs not yet in ``LONG_SEEDS``: the paper's arm and its two baselines, seed by seed."""
    seeds = range(len(lang.LONG_SEEDS), lang.LONG_SEED_TARGET)
    return [RunSpec(fbt_text.run_name(arm, seed), fbt_text.config(arm, 1.0, seed), EXACT, eval_size(1.0))
            for seed in seeds for arm in (lang.PAPER_ARM, *lang.CONTROL)]


def finished(name: str) -> Path:
    return WORK / fbt_text.RECIPE.name / name


def resumable(name: str) -> Path:
    return WORK / "scratch" / fbt_text.RECIPE.name / name


def unpack() -> list[str]:
    """The archive's runs that are not here yet (a run here may be further along than the archive's copy)."""
    if not ARCHIVE.is_file():
        return []
    with tarfile.open(ARCHIVE) as tar:
        members = [(m, run_of(m.name)) for m in tar.getmembers()]
        new = sorted({run for _, run in members if not finished(run).exists() and not resumable(run).exists()})
        tar.extractall(WORK, members=[m for m, run in members if run in new], filter="data")
    return new


def run_of(member: str) -> str:
    """The run an archive member belongs to: ``fbt_text/RUN/...`` (trained) or ``scratch/fbt_text/RUN/...``."""
    parts = member.split("/")
    return parts[2] if parts[0] == "scratch" else parts[1]


def pack() -> list[str]:
    """Write the archive (atomically) from every finished run and every unfinished run's resumable state."""
    buffer, names = io.BytesIO(), []
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for spec in pending():
            if finished(spec.name).is_dir():
                tar.add(finished(spec.name), f"{fbt_text.RECIPE.name}/{spec.name}")
                names.append(f"{spec.name} (trained)")
            elif (resumable(spec.name) / "checkpoint").is_dir():
                for part in KEEP:
                    tar.add(resumable(spec.name) / part, f"scratch/{fbt_text.RECIPE.name}/{spec.name}/{part}")
                names.append(f"{spec.name} (resumable)")
    if names:
        write_bytes_atomic(ARCHIVE, buffer.getvalue())
    return names


def land() -> list[str]:
    """Every pending run finished: copy them into the recipe's folder and remove the archive."""
    missing = [s.name for s in pending() if not finished(s.name).is_dir()]
    if missing:
        raise SystemExit(f"not every pre-registered run is trained yet: {missing}")
    for spec in pending():
        shutil.copytree(finished(spec.name), checkpoints_root() / fbt_text.RECIPE.name / spec.name)
    ARCHIVE.unlink(missing_ok=True)
    return [s.name for s in pending()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("train", "pack", "land"))
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at a time, one thread each")
    args = parser.parse_args()
    if args.action == "train":
        print("unpacked:", unpack() or "nothing", flush=True)
        calls = [(s, finished(s.name), WORK / "scratch", False) for s in pending()]
        print("trained:", map_jobs(_train_saved, calls, args.jobs, desc="pending seeds"))
    else:
        print(f"{args.action}:", (pack if args.action == "pack" else land)() or "nothing")


if __name__ == "__main__":
    main()
