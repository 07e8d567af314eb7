"""RESULTS.md, written from every recipe's summary.json: each claim with its gates, interval, seeds, verdict;
and the "What we found" table in the forms the README (Markdown) and the notebooks (plain text) show."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..evaluation import MIN_SEEDS
from ..store import write_bytes_atomic
from .recipes import RECIPES
from .results_table import findings_table
from .store import checkpoints_root

FINDINGS_BEGIN = "<!-- findings: written by python -m workbench reproduce all; do not edit -->"
FINDINGS_END = "<!-- findings end -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _value(value: float | None) -> str:
    """A measured gate value; None (stored for a value that could not be measured) as "not measured"."""
    return "not measured" if value is None else f"{value:.4g}"


def _specimen_gates(specimens: list[dict]) -> list[str]:
    """A recipe that gates each specimen on its own (``layer0_probes``): one row per specimen gate, with the
    answer accuracy under the exact sequential schedule beside it (below the gate: unfit for SOFT decoding)."""
    if not specimens:
        return []
    rows = ["", "| specimen gate | condition | measured | passed | exact (sequential) |",
            "| --- | --- | --- | --- | --- |"]
    for r in specimens:
        exact = r.get("answer_sequential")
        rows.append(f"| {_cell(r['gate'])} | {r['gate_condition']} | {r['gate_value']:.3f} | "
                    f"{'pass' if r['gated'] else '**fail**'} | {'-' if exact is None else f'{exact:.3f}'} |")
    return rows


def _extensions(extensions: list[dict]) -> list[str]:
    """The rule applied beyond the paper's claim: one row per extension, apart from the verdict."""
    if not extensions:
        return []
    return (["", "Extensions (the same rule beyond the paper's claim; they never change the verdict):", "",
             "| extension | verdict | numbers |", "| --- | --- | --- |"]
            + [f"| {_cell(e['name'])} | {_cell(e['verdict'])} | {_cell(e['number'])} |" for e in extensions] + [""])


def shipped_summaries(root: str | Path | None = None) -> dict[str, dict]:
    """Every recipe's summary.json under ``root`` (default: the checkpoint root), as written, none retrained."""
    root = checkpoints_root() if root is None else Path(root)
    return {name: json.loads((root / name / "summary.json").read_text()) for name in RECIPES
            if (root / name / "summary.json").is_file()}


def findings_markdown(summaries: dict[str, dict], root: str | Path | None = None) -> str:
    """The README's "findings at a glance": one line per recipe, the paper's claim, the verdict and our number,
    linked to the recipe's section of RESULTS.md (where its sentence, gates and extensions are)."""
    lines = []
    for r in findings_table(summaries, root).itertuples():
        if r.kind == "extension":
            continue
        paper = r.paper or f"(ours: {r.kind})"
        lines.append(f"- [{r.recipe}](RESULTS.md#{r.recipe.replace('_', '-')}) — {_cell(paper)}: "
                     f"**{_cell(r.verdict)}** ({_cell(r.ours)})")
    return "\n".join(lines)


def findings_text(summaries: Mapping[str, Mapping[str, Any]], width: int = 110) -> str:
    """The findings of ``summaries`` as a notebook prints them: ``recipe: verdict`` (an extension row:
    ``recipe [beyond the claim: ...]: verdict``), then the sentence wrapped and indented under it, broken at
    spaces only (so the lines joined by spaces give the sentence back)."""
    return "\n".join(f"{r.recipe}{f' [{r.paper}]' if r.kind == 'extension' else ''}: {r.verdict}\n"
                     + textwrap.fill(r.finding, width, initial_indent="  ", subsequent_indent="  ",
                                     break_on_hyphens=False)
                     for r in findings_table(summaries).itertuples())


def write_readme_findings(readme: str | Path, root: str | Path | None = None) -> str:
    """Replace the README's findings block (between ``FINDINGS_BEGIN`` and ``FINDINGS_END``) with the table of
    the summaries under ``root``; everything else in the file is kept. Returns the table."""
    readme = Path(readme)
    text = readme.read_text()
    if text.count(FINDINGS_BEGIN) != 1 or text.count(FINDINGS_END) != 1:
        raise ValueError(f"readme={str(readme)!r} is invalid: it needs one {FINDINGS_BEGIN!r} line and one "
                         f"{FINDINGS_END!r} line after it, around the findings table")
    before, rest = text.split(FINDINGS_BEGIN)
    table = findings_markdown(shipped_summaries(root), root)
    write_bytes_atomic(readme, (before + FINDINGS_BEGIN + "\n" + table + "\n" + FINDINGS_END
                                + rest.split(FINDINGS_END, 1)[1]).encode())
    return table


def write_results_md(root: str | Path | None = None, path: str | Path | None = None) -> str:
    """One summary row and one section per recipe, numbers as computed; returns the text written."""
    root = checkpoints_root() if root is None else Path(root)
    path = root.parent / "RESULTS.md" if path is None else Path(path)
    rel = Path(os.path.relpath(root.resolve(), path.resolve().parent)).as_posix()
    head = ["# Results", "",
            "Written by `python -m workbench reproduce all` from each recipe's `checkpoints/RECIPE/summary.json`; "
            "every number is computed by `workbench/experiments/`. Each recipe states, before it trains, its "
            "**gates** (competence preconditions its models must pass) and its **decision rule**; a recipe whose "
            "gate fails reports `not tested` and no other verdict. Intervals are 95 % hierarchical bootstrap "
            f"intervals (seeds, then held-out examples); a difference between arms needs >= {MIN_SEEDS} seeds per "
            "arm.", "",
            "| recipe | kind | verdict | gates passed | seeds | training minutes |",
            "| --- | --- | --- | --- | --- | --- |"]
    sections, total = [], 0.0
    for name, recipe in RECIPES.items():
        summary_path = root / name / "summary.json"
        if not summary_path.is_file():
            head.append(f"| {name} | {recipe.kind} | not run yet | | | |")
            continue
        s = json.loads(summary_path.read_text())
        gates = s.get("gates", [])
        minutes = float(s.get("train_minutes", 0.0))
        total += minutes
        short = "not tested (failed gates below)" if s["verdict"].startswith("not tested") else s["verdict"]
        head.append(f"| [{name}](#{name.replace('_', '-')}) | {recipe.kind} | **{_cell(short)}** | "
                    f"{sum(g['passed'] for g in gates)} / {len(gates)} | {len(s.get('seeds', []))} | {minutes:.1f} |")
        sections += [f"## {name}", "", f"- **Claim**: {recipe.claim}", f"- **Setting**: {s['setting']} "
                     f"(scale {s['scale']})", f"- **Chance floor**: {s.get('chance', recipe.chance)}",
                     f"- **Decision rule**: {recipe.rule}", "", "| gate | measured | needs | quantity | passed |",
                     "| --- | --- | --- | --- | --- |"]
        sections += [f"| {_cell(g['name'])} | {_value(g['value'])} | {g['op']} {g['threshold']:g} | "
                     f"{_cell(g['quantity'])} | {'pass' if g['passed'] else '**fail**'} |" for g in gates]
        sections += _specimen_gates(s.get("specimens", []))
        sections += ["", f"- **Our number**: {s['number']}", f"- **Seeds**: {s.get('seeds', [])}",
                     f"- **Verdict**: **{s['verdict']}**", f"- **Training minutes**: {minutes:.1f}"]
        sections += _extensions(s.get("extensions", []))
        if recipe.caveat:
            sections.append(f"- **Reading it**: {recipe.caveat}")
        sections += ["", f"![{name}]({rel}/{name}/results.png)", ""]
    text = "\n".join(head + ["", f"Training time of all runs as recorded in their metrics (2 CPU cores, shared): "
                             f"{total:.1f} minutes (a run two recipes share counts in each); evaluation and "
                             "analysis come on top.", ""] + sections)
    write_bytes_atomic(path, (text if text.endswith("\n") else text + "\n").encode())
    return text
