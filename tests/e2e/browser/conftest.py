"""Fixtures of the browser tests: one JupyterLab server, one Chromium and one time budget per module.

The server serves a temporary folder holding a copy of ``notebooks/`` (JupyterLab autosaves what it
runs; the committed notebooks must not change) and the harness's own self-test notebooks; a module may
serve another root by defining its own ``lab_root`` (test_docs_in_browser serves docs/). Both fixtures
stop what they started in their teardown, whatever the tests did; ``tools/browser`` explains how.
Everything is skipped, with the reason, where Chromium, Playwright or JupyterLab is missing.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import browser as driver


@pytest.fixture(scope="module")
def browser_budget() -> driver.Deadline:
    """The module's time (WORKBENCH_BROWSER_BUDGET_SECONDS, default 900 s), from its first use: the notebooks are
    split over two modules so that pytest-xdist runs them on two workers, each with its own server and budget."""
    return driver.Deadline(driver.BUDGET_SECONDS)


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's root: ``notebooks/`` (a copy) and ``selftest/`` (generated)."""
    reason = driver.missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("jupyterlab")
    driver.stage(sorted(driver.NOTEBOOKS.glob("*.ipynb")), root)
    driver.write_selftest_notebooks(root / "selftest")
    return root


@contextlib.contextmanager
def running(process: driver.JupyterLab | driver.Chromium, name: str) -> Iterator:
    """Start ``process``; on the way out (even from a failed start) stop it and warn about what had to be killed."""
    try:
        process.start()
        yield process
    finally:
        killed = process.stop()
        if killed:
            warnings.warn(f"{name} left processes that had to be killed: {killed}", stacklevel=1)


@pytest.fixture(scope="module")
def lab(lab_root: Path, browser_budget: driver.Deadline, request: pytest.FixtureRequest):
    """The server, for the module; a SIGTERM to pytest meanwhile still runs this teardown."""
    module = request.module.__name__.split(".")[-1]  # two modules may run at once: a log each
    server = driver.JupyterLab(lab_root, log=driver.SCREENS / f"jupyterlab-{module}.log",
                               startup_seconds=min(120.0, max(browser_budget.left(), 1.0)))
    with driver.terminate_as_interrupt(), running(server, "JupyterLab"):
        yield server


@pytest.fixture(scope="module")
def chromium(lab: driver.JupyterLab):
    with running(driver.Chromium(), "Chromium") as browser:
        yield browser


@pytest.fixture(scope="module")
def screens_index(request: pytest.FixtureRequest):
    """The reports of the notebooks checked in this module, written to reports/screens/index-<module>.md at its end
    (two modules run side by side: one index each)."""
    reports: list[driver.NotebookReport] = []
    yield reports
    if reports:
        module = request.module.__name__.split(".")[-1]
        driver.write_index(reports, driver.SCREENS, f"the browser tests (pytest {request.module.__file__})",
                           name=f"index-{module}.md")
