"""Fixtures of the browser tests: one JupyterLab server and one Chromium for the module, a time budget.

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


@pytest.fixture(scope="session")
def browser_budget() -> driver.Deadline:
    """The whole browser session's time (WORKBENCH_BROWSER_BUDGET_SECONDS, default 900 s), from its first use."""
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
def lab(lab_root: Path, browser_budget: driver.Deadline):
    """The server, for the module; a SIGTERM to pytest meanwhile still runs this teardown."""
    server = driver.JupyterLab(lab_root, log=driver.SCREENS / "jupyterlab.log",
                               startup_seconds=min(120.0, max(browser_budget.left(), 1.0)))
    with driver.terminate_as_interrupt(), running(server, "JupyterLab"):
        yield server


@pytest.fixture(scope="module")
def chromium(lab: driver.JupyterLab):
    with running(driver.Chromium(), "Chromium") as browser:
        yield browser


@pytest.fixture(scope="module")
def screens_index():
    """The reports of the notebooks checked in this module, written to reports/screens/index.md at its end."""
    reports: list[driver.NotebookReport] = []
    yield reports
    if reports:
        driver.write_index(reports, driver.SCREENS, "the browser tests (pytest tests/e2e/browser)")
