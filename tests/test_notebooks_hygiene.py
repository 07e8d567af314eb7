"""Committed notebooks are executed, clean and portable (nbval runs them; this checks what is committed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
ABSOLUTE = re.compile(r'(?<![\w.])/(home|root|Users|tmp|work)/')
OBJECTIVES = re.compile(r"you will learn|you will be able to|objectives", re.IGNORECASE)


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
