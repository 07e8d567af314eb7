"""RESULTS.md, docs/SPECIMENS.md and the README's findings, from every recipe's summary.json."""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..files import write_bytes_atomic
from ..stats import MIN_SEEDS
from ..validation import fail
from .recipes import RECIPES
from .results_table import findings_table, specimens_table
from .store import checkpoints_root

FINDINGS_BEGIN = "<!-- findings: written by python -m workbench reproduce all; do not edit -->"
FINDINGS_END = "<!-- findings end -->"
MAX_CELL = 400  # characters of the longest table cell a page writes; a longer text is a note under its table
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")  # a full stop before a capital: "0.5. On" splits, "0.5 bits" not


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _value(value: float | None) -> str:
    """None as "not measured"."""
    return "not measured" if value is None else f"{value:.4g}"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table; a long cell becomes a numbered note, so it cannot stretch the table."""
    lines, notes = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"], []
    for row in rows:
        cells = []
        for text in map(_cell, row):
            if len(text) > MAX_CELL:
                notes.append(text)
                text = f"note {len(notes)} below"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ([""] + [f"{k}. {text}" for k, text in enumerate(notes, 1)] if notes else [])


def _first_sentence(text: str) -> tuple[str, str]:
    parts = _SENTENCE_END.split(text.strip(), maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ""


def _setting(name: str, runs: pd.DataFrame) -> str:
    """What a recipe's verdict rests on, in a few words."""
    if not len(runs):
        return "no models of its own: it analyses those of " + ", ".join(RECIPES[name].reads)
    steps = sorted(set(runs["steps"]))
    return (f"{len(runs)} models on {', '.join(dict.fromkeys(runs['task']))}: "
            f"{', '.join(dict.fromkeys(runs['shape']))} ({', '.join(dict.fromkeys(runs['mechanism']))}), "
            f"{steps[0] if len(steps) == 1 else f'{steps[0]}-{steps[-1]}'} steps")


def _seeds(summary: Mapping[str, Any]) -> str:
    return ", ".join(map(str, summary.get("seeds", []))) or "none recorded"


def _gates(summary: Mapping[str, Any]) -> str:
    """How many gates passed, failures named, plus the specimen gates."""
    gates = summary.get("gates", [])
    failed = [g["name"] for g in gates if not g["passed"]]
    text = f"{len(gates) - len(failed)} / {len(gates)} passed" + (f" (failed: {'; '.join(failed)})" if failed else "")
    specimens = summary.get("specimens", [])
    if specimens:
        text += f"; specimen gates {sum(bool(r['gated']) for r in specimens)} / {len(specimens)} passed"
    return text


def _specimen_gates(specimens: list[dict]) -> list[str]:
    """One row per specimen gate, with the exact-recurrence accuracy (low: unfit for SOFT)."""
    if not specimens:
        return []
    rows = [[r["gate"], r["gate_condition"], f"{r['gate_value']:.3f}", "pass" if r["gated"] else "**fail**",
             "-" if r.get("answer_sequential") is None else f"{r['answer_sequential']:.3f}"] for r in specimens]
    return [""] + _table(["specimen gate", "condition", "measured", "passed", "exact (sequential)"], rows)


def _extensions(extensions: list[dict]) -> list[str]:
    """One row per extension of the rule."""
    if not extensions:
        return []
    return (["", "Extensions (the same rule beyond the paper's claim; they never change the verdict):", ""]
            + _table(["extension", "verdict", "numbers"], [[e["name"], e["verdict"], e["number"]] for e in extensions])
            + [""])


def shipped_summaries(root: str | Path | None = None) -> dict[str, dict]:
    """Every recipe's summary.json under ``root``, none retrained."""
    root = checkpoints_root() if root is None else Path(root)
    return {name: json.loads((root / name / "summary.json").read_text()) for name in RECIPES
            if (root / name / "summary.json").is_file()}


def findings_markdown(summaries: dict[str, dict], root: str | Path | None = None) -> str:
    """The README's findings: one line per recipe, linked to RESULTS.md."""
    return "\n".join(f"- [{r.recipe}](RESULTS.md#{r.recipe}) — {_cell(r.paper or f'(ours: {r.kind})')}: "
                     f"**{_cell(r.verdict)}** ({_cell(r.ours)})"
                     for r in findings_table(summaries, root).itertuples() if r.kind != "extension")


def findings_text(summaries: Mapping[str, Mapping[str, Any]], width: int = 110) -> str:
    """The findings as a notebook prints them, wrapped at spaces only."""
    return "\n".join(f"{r.recipe}{f' [{r.paper}]' if r.kind == 'extension' else ''}: {r.verdict}\n"
                     + textwrap.fill(r.finding, width, initial_indent="  ", subsequent_indent="  ",
                                     break_on_hyphens=False)
                     for r in findings_table(summaries).itertuples())


def write_readme_findings(readme: str | Path, root: str | Path | None = None) -> str:
    """Rewrite the README's findings block; returns it."""
    readme = Path(readme)
    text = readme.read_text()
    if text.count(FINDINGS_BEGIN) != 1 or text.count(FINDINGS_END) != 1:
        fail("readme", str(readme), f"needs one {FINDINGS_BEGIN!r} line, then one {FINDINGS_END!r}")
    before, rest = text.split(FINDINGS_BEGIN)
    table = findings_markdown(shipped_summaries(root), root)
    write_bytes_atomic(readme, (before + FINDINGS_BEGIN + "\n" + table + "\n" + FINDINGS_END
                                + rest.split(FINDINGS_END, 1)[1]).encode())
    return table


def _section(name: str, s: Mapping[str, Any], finding: Any, runs: pd.DataFrame, figures: str) -> list[str]:
    """A recipe's section: its summary, then what it rests on."""
    recipe = RECIPES[name]
    sentence, rest = _first_sentence(finding.finding)
    lines = [f"## {name}", "", f"- **Claim**: {recipe.claim}",
             f"- **Setting**: {_setting(name, runs)}; seeds {_seeds(s)}", f"- **Gates**: {_gates(s)}",
             f"- **Number**: {finding.ours}", f"- **Verdict**: **{finding.verdict}**",
             f"- **In one sentence**: {sentence}", "", "**In full**", "",
             f"- **Setting, in words**: {s['setting']} (scale {s['scale']})",
             f"- **Chance floor**: {s.get('chance', recipe.chance)}", f"- **Decision rule**: {recipe.rule}"]
    if rest:
        lines.append(f"- **The finding, continued**: {rest}")
    lines += [""] + _table(["gate", "measured", "needs", "quantity", "passed"],
                           [[g["name"], _value(g["value"]), f"{g['op']} {g['threshold']:g}", g["quantity"],
                             "pass" if g["passed"] else "**fail**"] for g in s.get("gates", [])])
    lines += _specimen_gates(s.get("specimens", []))
    lines += ["", f"- **Our number, in full**: {s['number']}"]
    if s["verdict"] != finding.verdict:
        lines.append(f"- **Verdict, in full**: **{s['verdict']}**")
    lines.append(f"- **Training minutes**: {float(s.get('train_minutes', 0.0)):.1f}")
    lines += _extensions(s.get("extensions", []))
    if recipe.caveat:
        lines.append(f"- **Reading it**: {recipe.caveat}")
    return lines + ["", f"![{name}]({figures}/{name}/results.png)", ""]


def results_markdown(root: str | Path | None = None, figures: str = "checkpoints") -> str:
    """RESULTS.md's text; ``figures`` is the checkpoint root as the page links it."""
    root = checkpoints_root() if root is None else Path(root)
    summaries = shipped_summaries(root)
    found = findings_table(summaries, root).query("kind != 'extension'").set_index("recipe") if summaries else None
    runs = specimens_table(summaries, root) if summaries else None
    head = ["# Results", "",
            "Written by `python -m workbench reproduce all` (or, from the stored summaries alone, `make docs`) "
            "from each recipe's `checkpoints/RECIPE/summary.json`; every number is computed by "
            "`workbench/experiments/`. Each recipe states, before it trains, its "
            "**gates** (competence preconditions its models must pass) and its **decision rule**; a recipe whose "
            "gate fails reports `not tested` and no other verdict. Intervals are 95 % hierarchical bootstrap "
            f"intervals (seeds, then held-out examples); a difference between arms needs >= {MIN_SEEDS} seeds per "
            "arm. Each section opens with its summary; the shipped models are indexed in "
            "[docs/SPECIMENS.md](docs/SPECIMENS.md).", ""]
    rows, sections, total = [], [], 0.0
    for name, recipe in RECIPES.items():
        if name not in summaries:
            rows.append([name, recipe.kind, "not run yet", "", "", ""])
            continue
        s = summaries[name]
        gates, minutes = s.get("gates", []), float(s.get("train_minutes", 0.0))
        total += minutes
        short = "not tested (failed gates below)" if s["verdict"].startswith("not tested") else s["verdict"]
        rows.append([f"[{name}](#{name})", recipe.kind, f"**{short}**",
                     f"{sum(g['passed'] for g in gates)} / {len(gates)}", len(s.get("seeds", [])), f"{minutes:.1f}"])
        sections += _section(name, s, found.loc[name], runs[runs["recipe"] == name], figures)
    head += _table(["recipe", "kind", "verdict", "gates passed", "seeds", "training minutes"], rows)
    return "\n".join(head + ["", f"Training time of all runs as recorded in their metrics (2 CPU cores, shared): "
                             f"{total:.1f} minutes (a run two recipes share counts in each); evaluation and "
                             "analysis come on top.", ""] + sections).rstrip("\n") + "\n"


def write_results_md(root: str | Path | None = None, path: str | Path | None = None) -> str:
    """Write RESULTS.md (default: beside the checkpoint root); returns the text."""
    root = checkpoints_root() if root is None else Path(root)
    path = root.parent / "RESULTS.md" if path is None else Path(path)
    text = results_markdown(root, Path(os.path.relpath(root.resolve(), path.resolve().parent)).as_posix())
    write_bytes_atomic(path, text.encode())
    return text


def specimens_markdown(root: str | Path | None = None, results: str = "../RESULTS.md") -> str:
    """docs/SPECIMENS.md's text; ``results`` is RESULTS.md as the page links it."""
    root = checkpoints_root() if root is None else Path(root)
    summaries = shipped_summaries(root)
    if not summaries:
        fail("root", str(root), "it holds no recipe's summary.json")
    found = findings_table(summaries, root).query("kind != 'extension'").set_index("recipe")
    runs = specimens_table(summaries, root)
    runs["params"] = runs["params"].map("{:,}".format)
    lines = ["# Specimens", "",
             "Written by `make docs` from each recipe's `checkpoints/RECIPE/summary.json` and its runs' `config.json` "
             "and `metrics.json` (nothing is trained); do not edit. A specimen is a trained model the repository "
             "ships: `workbench.experiments.load_run(RECIPE, RUN)` loads one and `run_metrics(RECIPE, RUN)` gives "
             "its training record. A checkpoint's `config.json` holds its model; its task is named here and in its "
             f"`metrics.json` (`train_config.task`). Each recipe's numbers and reading: [RESULTS.md]({results}).", ""]
    index, sections = [], []
    for name, s in summaries.items():
        mine, verdict = runs[runs["recipe"] == name], found.loc[name, "verdict"]
        index.append([f"[{name}](#{name})", _setting(name, mine), _seeds(s), _gates(s), RECIPES[name].claim,
                      verdict])
        sections += [f"## {name}", "", f"- **Claim**: {RECIPES[name].claim}", f"- **Verdict**: **{verdict}** "
                     f"([in full]({results}#{name}))",
                     f"- **It shows**: {_first_sentence(found.loc[name, 'finding'])[0]}",
                     *(f"- **Gate** {g['name']}: {_value(g['value'])} (needs {g['op']} {g['threshold']:g}): "
                       f"{'pass' if g['passed'] else '**fail**'}" for g in s.get("gates", [])), ""]
        columns = ["run", "task", "task_params", "mechanism", "shape", "params", "schedule", "steps", "seed"]
        shown = [[*row, f"{r.measure} {r.held_out:.3f} ({r.held_out_schedule})",
                  _run_gate(r.gate, r.gate_value, r.gate_passed)]
                 for row, r in zip(mine[columns].values.tolist(), mine.itertuples(), strict=True)]
        sections += (_table([c.replace("_", " ") for c in columns] + ["held out (schedule)", "own gate"], shown)
                     if len(mine) else [f"No models of its own: {_setting(name, mine).split(': ', 1)[1]}."])
        sections.append("")
    lines += _table(["recipe", "models", "seeds", "gates", "claim", "verdict"], index)
    return "\n".join(lines + [""] + sections).rstrip("\n") + "\n"


def _run_gate(gate: str | float | None, value: float, passed: bool | None) -> str:
    """A specimen's own gate, else the recipe's."""
    if gate is None or pd.isna(gate):
        return "the recipe's (above)"
    return f"{value:.3f} {'pass' if passed else '**fail**'}"
