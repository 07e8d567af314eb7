"""Committed notebooks are executed, clean and portable (nbval runs them; this checks what is committed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
ABSOLUTE = re.compile(r'(?<![\w.])/(home|root|Users|tmp|work)/')
OBJECTIVES = re.compile(r"you will learn|you will be able to|objectives", re.IGNORECASE)
# Where a reader of the repository cannot follow: the project's shared folder, its private notes, a parent folder
# (but the repository's own docs/, which a notebook links as ../docs/PAGE.md).
OUTSIDE = re.compile(r"shared/|seeds/|PAPERS\.md|\.\./(?!docs/[A-Z_]+\.md\b)")
WIDGET = "application/vnd.jupyter.widget-view+json"
def markdown(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_clean(path):
    nb = json.loads(path.read_text())
    assert "widgets" not in nb.get("metadata", {}), "widget state in metadata"
    assert not ABSOLUTE.search(json.dumps(nb)), "an absolute path"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c.get("execution_count") for c in code), "not executed top to bottom"
    assert not any(o.get("output_type") == "error" for c in code for o in c.get("outputs", [])), "an error output"
    counts = [c["execution_count"] for c in code]
    assert counts == sorted(counts), "cells executed out of order"
    first = "".join(nb["cells"][0]["source"])
    assert nb["cells"][0]["cell_type"] == "markdown" and OBJECTIVES.search(first), "no objectives up front"
    assert any("NBVAL_CHECK_OUTPUT" in "".join(c["source"]) for c in code), "no output-checked cell"
    assert any("wb.widgets." in "".join(c["source"]) for c in code), "no widget"


def test_notebooks_are_numbered_in_teaching_order():
    """00, 01, ... without gaps; a letter marks a notebook that continues the one of its number (05 -> 05b)."""
    parsed = [re.fullmatch(r"(\d\d)([a-z]?)_\w+", p.stem) for p in NOTEBOOKS]
    assert all(parsed), f"names not NN_topic or NNx_topic: {[p.name for p, m in zip(NOTEBOOKS, parsed) if not m]}"
    numbers = [int(m.group(1)) for m in parsed if not m.group(2)]
    assert numbers == list(range(len(numbers)))
    assert all(int(m.group(1)) in numbers for m in parsed if m.group(2)), "a continuation without its notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_names_no_path_outside_the_repository(path):
    """Pointers go to METHODS.md and the papers' arXiv ids, never to files a reader of the repository lacks."""
    nb = json.loads(path.read_text())
    sources = ["".join(c["source"]) for c in nb["cells"]]
    outside = sorted({m.group(0) for text in sources for m in OUTSIDE.finditer(text)})
    assert not outside, f"names paths outside the repository: {outside}"
    assert any("METHODS.md" in text for text in sources), "no pointer to METHODS.md"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_widget_has_a_static_twin(path):
    """A code host strips widget state: the cell that shows a widget also shows its figure as a plain PNG."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        kinds = [kind for o in cell.get("outputs", []) for kind in o.get("data", {})]
        if WIDGET in kinds:
            assert "image/png" in kinds[kinds.index(WIDGET):], f"a widget without its figure under it: {cell['source']}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_ends_with_questions_and_hidden_answers(path):
    last = markdown(json.loads(path.read_text()))[-1]
    assert "Check your understanding" in last and last.count("<details>") >= 3, "no answered questions at the end"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if 1 <= int(p.name[:2]) <= 7],
                         ids=[p.name for p in NOTEBOOKS if 1 <= int(p.name[:2]) <= 7])
def test_has_an_exercise_checked_by_the_package(path):
    """An exercise: the learner's function, hints in <details>, and an exercises check right after."""
    nb = json.loads(path.read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert any("ex.check_" in text or "exercises.check_" in text for text in code), "no exercise check"
    assert any("<details>" in text and "Hint" in text for text in markdown(nb)), "no hints"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if 1 <= int(p.name[:2]) <= 7],
                         ids=[p.name for p in NOTEBOOKS if 1 <= int(p.name[:2]) <= 7])
def test_three_graded_exercises_each_its_own(path):
    """At least three exercise checks a course notebook, and no check a notebook repeats from another."""
    checks = {p.name: set(re.findall(r"\bcheck_\w+(?=\()", "".join(
        "".join(c["source"]) for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code")))
        for p in NOTEBOOKS}
    assert len(checks[path.name]) >= 3, sorted(checks[path.name])
    shared = {c for name, other in checks.items() if name != path.name for c in other} & checks[path.name]
    assert not shared, f"{path.name} repeats {sorted(shared)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_markdown_cells_are_at_most_250_words(path):
    long = [(i, len("".join(c["source"]).split())) for i, c in enumerate(json.loads(path.read_text())["cells"])
            if c["cell_type"] == "markdown" and len("".join(c["source"]).split()) > 250]
    assert not long, f"cells (index, words) over 250: {long}"


GLOSSARY = re.compile(r"\*\*Glossary\b[^\n]*")
ENTRY = re.compile(r"^[>\s]*(?:[-*]\s+)?(\*\*|\*)(?P<term>[^*]+?)\1", re.M)
COURSE = [p for p in NOTEBOOKS if 1 <= int(p.name[:2]) <= 7]


def glossary_terms(cell: str) -> list[str]:
    """The terms a glossary cell defines: each entry's leading bold or italic words (``**a / b**`` is two)."""
    body = cell[GLOSSARY.search(cell).end():]
    return [part.strip() for m in ENTRY.finditer(body) for part in m.group("term").split(" / ") if part.strip()]


def undefined_use(path: Path) -> tuple[int, list[str]]:
    """(how many glossary cells the notebook has, the terms its glossary defines that no other cell uses)."""
    sources = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    boxes = [i for i, text in enumerate(sources) if GLOSSARY.search(text)]
    if len(boxes) != 1:
        return len(boxes), []
    others = "\n".join(text for i, text in enumerate(sources) if i != boxes[0]).lower()
    return 1, [term for term in glossary_terms(sources[boxes[0]]) if term.lower() not in others]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_one_glossary_whose_terms_the_notebook_uses(path):
    """A course notebook (01-07) has one glossary box, any other at most one, and every term a box defines is used
    in the notebook's other cells, so the box cannot drift from the text."""
    boxes, unused = undefined_use(path)
    assert boxes == 1 if path in COURSE else boxes <= 1, f"{boxes} glossary cells, not one"
    assert not unused, f"the glossary defines terms no other cell uses: {unused}"


def test_the_glossary_check_sees_drift(tmp_path):
    notebook = tmp_path / "nb.ipynb"
    cells = [{"cell_type": "markdown", "source": ["> **Glossary.**\n", "> - **KV cache**: kept keys.\n",
                                                  "> *Pass 2*: fed back.\n", "- **swap / cross**: edits\n"]},
             {"cell_type": "markdown", "source": ["The KV cache and pass 2; a swap."]}]
    notebook.write_text(json.dumps({"cells": cells}))
    assert undefined_use(notebook) == (1, ["cross"])
    notebook.write_text(json.dumps({"cells": cells + cells[:1]}))
    assert undefined_use(notebook) == (2, [])
