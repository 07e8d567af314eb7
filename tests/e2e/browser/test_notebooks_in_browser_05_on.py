"""The notebooks from 05 on, in JupyterLab in Chromium, as ``test_notebooks_in_browser`` checks those before:
a module of their own so that pytest-xdist runs the two halves on two workers at once."""

from __future__ import annotations

import pytest

from .notebook_checks import check_in_lab, notebook_params

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("notebook", notebook_params(first_half=False), ids=lambda nb: nb.stem if nb else "none")
def test_notebook_in_jupyterlab(notebook, lab, chromium, browser_budget, screens_index):
    check_in_lab(notebook, lab, chromium, browser_budget, screens_index)
