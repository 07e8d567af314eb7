"""In every notebook an exercise cell is a stub the learner fills, its solution folded away (the solutions
module's own source, so the two cannot drift), and the check right after it."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest

from exercises import solutions as sol

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOLUTION = re.compile(r"<details><summary>Solution</summary>.*?```python\n(.*?)```\s*</details>", re.S)


def exercises_in(path: Path) -> list[tuple[str, str, str]]:
    """(stub cell, solution shown, check cell) for every exercise check a notebook calls."""
    cells = json.loads(path.read_text())["cells"]
    found = []
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or not re.search(r"\bex(ercises)?\.check_\w+\(", source):
            continue
        before = [c for c in cells[:i]]
        stub_cell = next("".join(c["source"]) for c in reversed(before) if c["cell_type"] == "code")
        shown = [m.group(1) for c in before[-4:] if c["cell_type"] == "markdown"
                 for m in SOLUTION.finditer("".join(c["source"]))]
        found.append((stub_cell, shown[-1] if shown else "", source))
    return found


OWNED = sorted(NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("path", OWNED, ids=[p.name for p in OWNED])
def test_exercise_cells_are_stubs_with_the_solution_folded(path):
    """Each exercise: the learner's cell defines the function with a stub body (a docstring, then
    ``raise NotImplementedError(...)``); the solution folded under it is the solutions module's source; the
    check right after assigns what it hands back, so the cells below run on the stub too."""
    exercises = exercises_in(path)
    assert exercises, "no exercise"
    for stub_cell, shown, check_cell in exercises:
        functions = [node for node in ast.parse(stub_cell).body if isinstance(node, ast.FunctionDef)]
        assert len(functions) == 1, f"the cell before the check defines no single function:\n{stub_cell}"
        body = functions[0].body
        body = body[1:] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body
        raises = (len(body) == 1 and isinstance(body[0], ast.Raise)
                  and "NotImplementedError" in ast.unparse(body[0]))
        assert raises, f"{functions[0].name} is not a stub: its body is more than raise NotImplementedError"
        name = functions[0].name
        assert re.search(rf"^\s*{name} = (wb\.)?ex(ercises)?\.check_\w+\({name}\b", check_cell, re.M), check_cell
        assert shown, f"no folded solution (<details><summary>Solution</summary>) for {name}"
        assert shown.strip() == inspect.getsource(getattr(sol, name)).strip(), f"the folded {name} is not sol.{name}"


GRADED_HEADING = re.compile(r"^#+ .*\bExercise \((warm-up|core|stretch)\)", re.M | re.I)
EXERCISE_HEADING = re.compile(r"^#+ .*\bExercise\b.*$", re.M | re.I)


def exercise_headings(path: Path) -> list[str]:
    """For every exercise check a notebook calls, the heading line that introduces its exercise: the last
    markdown heading naming an exercise before the check."""
    cells = json.loads(path.read_text())["cells"]
    headings = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or not re.search(r"\bex(ercises)?\.check_\w+\(", "".join(cell["source"])):
            continue
        found = [m.group(0) for c in cells[:i] if c["cell_type"] == "markdown"
                 for m in EXERCISE_HEADING.finditer("".join(c["source"]))]
        headings.append(found[-1] if found else "")
    return headings


@pytest.mark.parametrize("path", OWNED, ids=[p.name for p in OWNED])
def test_every_exercise_states_its_grade(path):
    """Each exercise's heading says its grade, ``Exercise (warm-up|core|stretch): ...``, as a course grades them."""
    headings = exercise_headings(path)
    assert len(headings) == len(exercises_in(path))
    ungraded = [h for h in headings if not GRADED_HEADING.search(h)]
    assert not ungraded, f"exercises without a grade (warm-up, core or stretch): {ungraded}"


def test_the_grade_check_sees_a_missing_grade(tmp_path):
    notebook = tmp_path / "nb.ipynb"
    cells = [{"cell_type": "markdown", "source": ["### Exercise (core): one\n"]},
             {"cell_type": "code", "source": ["x = ex.check_a(x)"]},
             {"cell_type": "markdown", "source": ["## 2 · More\n", "### Exercise: two\n"]},
             {"cell_type": "code", "source": ["y = ex.check_b(y)"]}]
    notebook.write_text(json.dumps({"cells": cells}))
    assert [bool(GRADED_HEADING.search(h)) for h in exercise_headings(notebook)] == [True, False]
