"""The notebooks as a user meets them: JupyterLab in headless Chromium, driven by Playwright.

A package (not loose modules) so that this folder's ``conftest.py`` is imported as
``browser.conftest`` and never shadows ``tests/conftest.py``, which other test modules import as
``conftest``.
"""
