"""What both notebook modules share: the per-notebook deadline and the check of one notebook in JupyterLab.

The notebooks are split at ``05`` over ``test_notebooks_in_browser`` (the harness's self-checks, then 00-04) and
``test_notebooks_in_browser_05_on`` (05 onwards), so that pytest-xdist's ``--dist loadfile`` runs the halves on
two workers at once, each with its own server, Chromium and budget.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import browser as driver

NOTEBOOKS = sorted(driver.NOTEBOOKS.glob("*.ipynb"))
SPLIT = "05"  # notebooks whose name sorts before this run in the first module


def deadline_within(budget: driver.Deadline) -> driver.Deadline:
    """One notebook's deadline: its own limit, or what is left of the module's budget; skip when that is spent."""
    left = budget.left()
    if left < 20:
        pytest.skip(f"the browser tests' budget of {budget.seconds:.0f} s is spent "
                    "(WORKBENCH_BROWSER_BUDGET_SECONDS)")
    return driver.Deadline(min(driver.NOTEBOOK_SECONDS, left))


def notebook_params(first_half: bool) -> list:
    """The notebooks of one half as pytest parameters (one skipped placeholder when it has none)."""
    chosen = [nb for nb in NOTEBOOKS if (nb.name < SPLIT) == first_half]
    return chosen or [pytest.param(None, marks=pytest.mark.skip(reason="no notebooks/*.ipynb in this half"))]


def check_in_lab(notebook: Path, lab, chromium, budget: driver.Deadline, screens_index: list) -> None:
    """Run ``notebook`` in JupyterLab with Run All, move its widgets, save its screenshots (the notebook, each widget
    after it moved, each static figure in its cell); fail on any problem, skip when the module's budget ran out."""
    deadline = deadline_within(budget)
    report = driver.check_notebook(chromium.browser, lab, f"{notebook.parent.name}/{notebook.name}",
                                   driver.SCREENS, deadline, figures=True)
    screens_index.append(report)
    print(report.summary())
    if report.timed_out and deadline.seconds < driver.NOTEBOOK_SECONDS and not report.failed_before_timeout:
        pytest.skip(f"the browser tests' budget ran out during this notebook ({deadline.seconds:.0f} s were "
                    f"left of {budget.seconds:.0f}):\n{report.summary()}")
    assert report.ok, report.summary()
