"""Playwright's driver and Debian's Chromium, headless, with the flags a closed, GPU-less machine needs.

Never ``playwright install``: that downloads a browser and fails on a closed network.
``stop()`` closes both and kills whatever of them is left.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from .processes import descendants, reap
from .settings import CHROMIUM, CHROMIUM_FLAGS


class Chromium:
    """Playwright's driver and Debian's Chromium; ``stop()`` closes both and kills what is left."""

    def __init__(self) -> None:
        self.browser: Any = None
        self._playwright: Any = None
        self._family: list[Any] = []

    def start(self) -> Chromium:
        from playwright.sync_api import sync_playwright

        before = {p.pid for p in descendants(os.getpid())}
        try:
            self._playwright = sync_playwright().start()
            self.browser = self._playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                            args=CHROMIUM_FLAGS, timeout=90_000)
        finally:  # the driver (node) and Chromium's processes: ours to end
            self._family = [p for p in descendants(os.getpid()) if p.pid not in before]
        return self

    def stop(self) -> list[str]:
        for close in (getattr(self.browser, "close", None), getattr(self._playwright, "stop", None)):
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
        self.browser = self._playwright = None
        family, self._family = self._family, []
        return reap(family)

    def __enter__(self) -> Chromium:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
