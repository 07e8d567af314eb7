"""Where things are, which browser, how long each wait may take; and whether the checks can run here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tools/browser/settings.py -> the repository
NOTEBOOKS = REPO / "notebooks"
SCREENS = REPO / "reports" / "screens"
CHROMIUM = Path(os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium"))
# What a headless Chromium needs on a closed, GPU-less machine (as root: no sandbox). Without the
# background-networking flags it keeps trying to reach Google's hosts, which this network refuses.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]
NOTEBOOK_SECONDS = float(os.environ.get("WORKBENCH_BROWSER_NOTEBOOK_SECONDS", "180"))  # one notebook, all in
BUDGET_SECONDS = float(os.environ.get("WORKBENCH_BROWSER_BUDGET_SECONDS", "900"))  # the whole browser session
CHANGE_SECONDS = 60.0  # how long a widget may take to redraw after its control moves
VIEWPORT = {"width": 1400, "height": 1000}
MAX_SCREENSHOT_HEIGHT = 12000  # px; a longer notebook is cut there in its full-page screenshot


def missing_reason() -> str | None:
    """Why the browser checks cannot run here, or None when they can."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return (f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium); "
                "never 'playwright install'")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: pip install -e '.[dev]' (it drives Debian's Chromium)"
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return f"jupyterlab is not installed for {sys.executable}"
    return None
