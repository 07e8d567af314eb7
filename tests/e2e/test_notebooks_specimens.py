"""Every shipped run a notebook or a page names is one the specimens index (docs/SPECIMENS.md) lists, under that one
name: a notebook cannot teach on, and METHODS.md, RESULTS.md or the docs cannot cite, a run that was renamed,
retrained away or never shipped."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LITERAL = re.compile(r"""["']([a-z][a-z0-9_.]*)["']""")
SEEDED = re.compile(r"_s\d+$")  # how a recipe names a seed's run
SHIPPED = {p.parent.name for p in (ROOT / "checkpoints").glob("*/*/config.json")}
INDEXED = set(re.findall(r"^\| ([a-z][a-z0-9_.]*) \| ", (ROOT / "docs" / "SPECIMENS.md").read_text(), re.M))
PAGES = [ROOT / "README.md", ROOT / "RESULTS.md", ROOT / "notebooks" / "METHODS.md",
         *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "SPECIMENS.md")]
SEEDED_WORD = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*_s\d+)(?!\w)")  # a seed's run named in prose
QUOTED = re.compile(r"`([a-z][a-z0-9_.]*)`")


def named_runs(path: Path) -> set[str]:
    """The string literals of a notebook's code that name a run: a shipped run's name, or any name ending in a
    seed (``_s0``), shipped or not."""
    cells = json.loads(path.read_text())["cells"]
    literals = {m for c in cells if c["cell_type"] == "code" for m in LITERAL.findall("".join(c["source"]))}
    return {name for name in literals if name in SHIPPED or SEEDED.search(name)}


def named_in_prose(text: str) -> set[str]:
    """The runs a page's text names: any word ending in a seed (``_s0``), or a shipped run's name in backticks."""
    return set(SEEDED_WORD.findall(text)) | {name for name in QUOTED.findall(text) if name in SHIPPED}


def prose_of(path: Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_a_notebook_names_only_indexed_runs(path):
    assert not named_runs(path) - INDEXED, f"{path.name} names runs the specimens index does not list"
    assert not named_in_prose(prose_of(path)) - INDEXED, f"{path.name}'s text names runs the index does not list"


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_a_page_names_only_indexed_runs(path):
    assert not named_in_prose(prose_of(path)) - INDEXED, f"{path.name} names runs the specimens index does not list"


def test_the_check_sees_the_runs_notebooks_teach_on(tmp_path):
    """The instrument detects what it guards: notebook 04's specimen is found, and a notebook naming a run that
    was never shipped is caught."""
    assert "glu_full_s0" in named_runs(ROOT / "notebooks" / "04_fbt_latent_feedback.ipynb") <= INDEXED
    notebook = tmp_path / "renamed.ipynb"
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "source": [
        'model = wb.experiments.load_run("fbt_text", "glu_full_s9")\n', 'label = "text_fbt"']}]}))
    assert named_runs(notebook) - INDEXED == {"glu_full_s9"}
    assert named_in_prose("the paper's arm, `glu_full_s0`, and glu_full_s9 (seed 9); not runs/x_s1.csv or "
                          "`fbt_text`") - INDEXED == {"glu_full_s9"}
    assert "delayed_memory_fbt_s1" in named_in_prose(prose_of(ROOT / "RESULTS.md")) <= INDEXED
