"""Committed notebooks are executed, clean and portable (nbval runs them; this checks what is committed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
ABSOLUTE = re.compile(r'(?<![\w.])/(home|root|Users|tmp|work)/')
OBJECTIVES = re.compile(r"you will learn|you will be able to|objectives", re.IGNORECASE)
# Where a reader of the repository cannot follow: the project's shared folder, its private notes, a parent folder.
OUTSIDE = re.compile(r"shared/|seeds/|PAPERS\.md|\.\./")
WIDGET = "application/vnd.jupyter.widget-view+json"
# Issue 23: notebooks 02, 03, 05, 06 and 07 are being rewritten around new specimens; until then they still
# point outside the repository and lack exercises, static twins and answered questions.
PENDING = {"02_lrt_mechanism.ipynb", "03_interleaved_training.ipynb", "05_probing_layer0.ipynb",
           "06_contraction.ipynb", "07_reasoning_traces.ipynb"}


def course(paths: list[Path]) -> list:
    """The notebooks, the ones still being rewritten for issue 23 marked as expected to fail (not strictly)."""
    pending = pytest.mark.xfail(strict=False, reason="issue 23: rewritten after its new specimens land")
    return [pytest.param(p, id=p.name, marks=pending if p.name in PENDING else ()) for p in paths]


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
    names = [p.stem for p in NOTEBOOKS]
    assert [int(n[:2]) for n in names] == list(range(len(names)))


@pytest.mark.parametrize("path", course(NOTEBOOKS))
def test_notebook_names_no_path_outside_the_repository(path):
    """Pointers go to METHODS.md and the papers' arXiv ids, never to files a reader of the repository lacks."""
    nb = json.loads(path.read_text())
    sources = ["".join(c["source"]) for c in nb["cells"]]
    outside = sorted({m.group(0) for text in sources for m in OUTSIDE.finditer(text)})
    assert not outside, f"names paths outside the repository: {outside}"
    assert any("METHODS.md" in text for text in sources), "no pointer to METHODS.md"


@pytest.mark.parametrize("path", course(NOTEBOOKS))
def test_every_widget_has_a_static_twin(path):
    """A code host strips widget state: the cell that shows a widget also shows its figure as a plain PNG."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        kinds = [kind for o in cell.get("outputs", []) for kind in o.get("data", {})]
        if WIDGET in kinds:
            assert "image/png" in kinds[kinds.index(WIDGET):], f"a widget without its figure under it: {cell['source']}"


@pytest.mark.parametrize("path", course(NOTEBOOKS))
def test_ends_with_questions_and_hidden_answers(path):
    last = markdown(json.loads(path.read_text()))[-1]
    assert "Check your understanding" in last and last.count("<details>") >= 3, "no answered questions at the end"


@pytest.mark.parametrize("path", course([p for p in NOTEBOOKS if 1 <= int(p.name[:2]) <= 7]))
def test_has_an_exercise_checked_by_the_package(path):
    """An exercise: the learner's function, hints in <details>, and a wb.exercises check right after."""
    nb = json.loads(path.read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert any("ex.check_" in text or "exercises.check_" in text for text in code), "no exercise check"
    assert any("<details>" in text and "Hint" in text for text in markdown(nb)), "no hints"
