"""Drive JupyterLab in headless Chromium the way a user does: open a notebook, Run All, use its widgets.

Shared by the browser tests (``tests/e2e/browser``) and by ``make screens`` (``tools/screens.py``), so
the test and the screenshots a person looks at come from one flow:

1. ``JupyterLab`` (``jupyterlab.py``) serves a temporary copy of the notebooks (``stage``) from this
   interpreter, on loopback with a random token and state of its own;
2. ``Chromium`` (``chromium.py``) is Debian's browser under Playwright's driver;
3. ``check_notebook`` (``notebook.py``) opens one notebook, runs it, moves each widget's control
   with the keyboard and checks that what the widget shows changes, with the page-side scripts in
   ``js/``; it returns a ``NotebookReport`` (``report.py``), which ``write_index`` collects;
4. ``processes.py`` bounds every wait (``Deadline``) and ends whatever a server or a browser left;
   ``settings.py`` says where things are and how long waits may take; ``selftest.py`` writes the
   notebooks that check the checker.

Every wait is bounded by a ``Deadline``; nothing here waits without one.
"""

from .chromium import Chromium
from .jupyterlab import JupyterLab, stage
from .notebook import check_notebook
from .processes import BudgetSpent, Deadline, terminate_as_interrupt
from .report import NotebookReport, WidgetCheck, write_index
from .selftest import write_selftest_notebooks
from .settings import BUDGET_SECONDS, CHANGE_SECONDS, NOTEBOOK_SECONDS, NOTEBOOKS, SCREENS, missing_reason

__all__ = ["BUDGET_SECONDS", "CHANGE_SECONDS", "NOTEBOOKS", "NOTEBOOK_SECONDS", "SCREENS", "BudgetSpent", "Chromium",
           "Deadline", "JupyterLab", "NotebookReport", "WidgetCheck", "check_notebook", "missing_reason", "stage",
           "terminate_as_interrupt", "write_index", "write_selftest_notebooks"]
