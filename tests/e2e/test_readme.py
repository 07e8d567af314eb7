"""The README reads newcomer-first: the picture of LRT and FBT before any command, API and scale-out later."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_image_the_readme_shows_is_committed():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert images and all((ROOT / path).is_file() for path in images), [p for p in images if not (ROOT / p).is_file()]


def test_it_opens_on_one_sentence_and_the_diagram_of_each_method():
    opening = README[:README.index("\n## ")]
    assert "**LRT**" in opening and "**FBT**" in opening
    assert "notebooks/screens/recurrence_lrt.png" in opening and "notebooks/screens/recurrence_fbt.png" in opening
    for later in ("wb.build_model", "torchrun", "make bench", "python -m workbench"):
        assert later not in opening and README.index(later) > README.index("## What we found"), later
    found = README[README.index("## What we found"):]
    assert "RESULTS.md" in found[:600] and not re.search(r"TODO|TBD|XXX|placeholder", found, re.I)


def test_the_diagrams_are_the_codes_own_drawing(tmp_path):
    sys.path.insert(0, str(ROOT))
    from tools import readme_figures

    for path in readme_figures.main(tmp_path):
        committed = ROOT / "notebooks" / "screens" / path.name
        assert Image.open(path).size == Image.open(committed).size, path.name


def test_the_findings_table_is_the_recipes_own():
    """The "What we found" block is what the shipped summaries say now: retrain a recipe without rewriting it
    (python -m workbench reproduce all) and this fails."""
    from workbench import experiments as E

    block = README.split(E.FINDINGS_BEGIN + "\n", 1)[1].split("\n" + E.results_page.FINDINGS_END, 1)[0]
    assert block == E.findings_markdown(E.shipped_summaries())
    assert block.count("- [") == len(E.shipped_summaries())  # a line per recipe (extensions: RESULTS.md)


def test_it_stays_within_its_word_budget():
    """A newcomer reads the README in minutes: at most 1,800 words (counted as ``wc -w`` does); the rest lives in
    RESULTS.md and docs/."""
    assert len(README.split()) <= 1800, len(README.split())
