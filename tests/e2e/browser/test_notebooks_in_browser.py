"""Every notebook as a user meets it: in JupyterLab, in Chromium, run with Run All, its widgets used.

nbval runs the cells in a kernel; this runs them in the browser, where the widgets must render and
respond. For each ``notebooks/*.ipynb``: no cell shows an error, every cell runs, every widget
renders, and moving each widget's slider or menu with the keyboard changes what it shows (its
label, summary or figure); screenshots of the notebook after that, of each widget and of each
static figure as drawn in its cell (``NAME-figNN.png``, to look at one by one) go to
``reports/screens/``. Two generated notebooks first check the checker: one whose widgets respond
must pass, one with an error and a widget that responds to nothing must fail for those reasons.

Here the notebooks before 05; ``test_notebooks_in_browser_05_on`` checks the rest on another worker
(``notebook_checks``). Bounded: one server and one browser per module, notebooks in sequence, at most
WORKBENCH_BROWSER_NOTEBOOK_SECONDS (180) per notebook and WORKBENCH_BROWSER_BUDGET_SECONDS (900)
per module; notebooks left when the budget is spent are skipped, saying so.
"""

from __future__ import annotations

import pytest

from tools import browser as driver

from .notebook_checks import check_in_lab, deadline_within, notebook_params

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_check_passes_widgets_that_respond(lab, chromium, browser_budget, tmp_path):
    report = driver.check_notebook(chromium.browser, lab, "selftest/widgets.ipynb", tmp_path,
                                   deadline_within(browser_budget))
    print(report.summary())
    assert report.ok, report.summary()
    assert report.executed == report.code_cells == 4
    moved = {w.control.split(" ")[0]: w for w in report.widgets}
    assert set(moved) == {"slider", "menu"} and len(report.widgets) == 3, report.summary()
    assert all(w.changed for w in report.widgets), report.summary()
    assert "n = 3" in report.widgets[0].after  # the label followed the slider through the kernel
    assert (tmp_path / "widgets.png").is_file() and (tmp_path / "widgets-cell03.png").is_file()


def test_the_check_fails_errors_and_widgets_that_do_not_respond(lab, chromium, browser_budget, tmp_path):
    report = driver.check_notebook(chromium.browser, lab, "selftest/broken.ipynb", tmp_path,
                                   deadline_within(browser_budget), change_seconds=8, figures=True)
    print(report.summary())
    problems = "\n".join(report.problems)
    assert "ZeroDivisionError" in problems, problems
    assert "cells [5] did not run" in problems, problems
    assert "did not change what the widget shows" in problems, problems
    assert "a 60x40 px image is drawn stretched to 600x40 px" in problems, problems
    assert "cell 3 ('from IPython.display import Image as Png, display'): a static figure is shown beside a live " \
           "widget" in problems, problems
    assert len(report.problems) == 5, problems
    assert (tmp_path / "broken.png").is_file()
    # figures=True: the one static figure (cell 3's second output) saved on its own, the widgets' images not
    assert sorted(p.name for p in tmp_path.glob("broken-fig*.png")) == ["broken-fig03-2.png"]


@pytest.mark.parametrize("notebook", notebook_params(first_half=True), ids=lambda nb: nb.stem if nb else "none")
def test_notebook_in_jupyterlab(notebook, lab, chromium, browser_budget, screens_index):
    check_in_lab(notebook, lab, chromium, browser_budget, screens_index)
