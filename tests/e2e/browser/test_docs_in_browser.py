"""The docs as a reader meets them in JupyterLab: the index of docs/ opens as rendered Markdown, its link to the
API reference opens that page, rendered, from a file the server has, and the reference's link to an area opens
that area's page.

JupyterLab opens a ``.md`` file in its text editor; a reader picks Open With > Markdown Preview, the command
(``markdownviewer:open``) this test runs. Its server serves a copy of docs/ with the reference as ``make docs``
writes it now (it is not committed), not the notebooks the other browser tests run: same fixtures, own root, and
its own time (``DOCS_SECONDS``), so notebooks that spent the session's budget first cannot starve its server's start.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tools import browser as driver
from tools import docs

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DOCS_SECONDS = 180.0  # a server's start (up to 120 s on a loaded machine) and two pages

OPEN = """async (path) => {
  await window.jupyterapp.restored;
  await window.jupyterapp.commands.execute('markdownviewer:open', {path});
}"""
# the Markdown preview in front, once it shows headings: its path, its headings (less their anchor), its links
SHOWN = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const rendered = w && w.node.querySelector('.jp-RenderedMarkdown');
  const headings = rendered ? [...rendered.querySelectorAll('h1, h2')] : [];
  if (!headings.length) return null;
  return {path: w.context.path, headings: headings.map(h => h.textContent.replace(/\u00b6$/, '').trim()),
          links: [...rendered.querySelectorAll('a[href]')].map(a => a.href)};
}"""


@pytest.fixture(scope="module")
def browser_budget() -> driver.Deadline:
    """This module's own time, from its first use, in place of the session's."""
    return driver.Deadline(DOCS_SECONDS)


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's root for this module: ``docs/`` as committed, with the reference written now."""
    reason = driver.missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("jupyterlab-docs")
    shutil.copytree(docs.DOCS, root / "docs", ignore=shutil.ignore_patterns(docs.API.name, docs.API_DIR.name))
    for path, text in docs.api_pages().items():
        (root / path.relative_to(docs.ROOT)).parent.mkdir(exist_ok=True)
        (root / path.relative_to(docs.ROOT)).write_text(text)
    return root


def headings(markdown: str, level: int) -> list[str]:
    """The text of the Markdown headings of ``level`` (``#`` is 1) outside code blocks, as a reader sees them."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    return [re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h).replace("`", "").strip()
            for h in re.findall(rf"^{'#' * level} (.+)$", prose, re.M)]


def _shown(page: Any, path: str, deadline: driver.Deadline) -> dict[str, Any]:
    """What the Markdown preview of ``path`` shows once it is the page in front."""
    page.wait_for_function(f"() => {{ const s = ({SHOWN})(); return s && s.path === {path!r}; }}",
                           timeout=deadline.ms(60))
    return page.evaluate(SHOWN)


def test_the_index_opens_rendered_and_its_links_open_the_api_reference_and_an_area(lab, chromium, browser_budget,
                                                                                    lab_root):
    if browser_budget.left() < 20:
        pytest.skip(f"this module's {browser_budget.seconds:.0f} s went to starting JupyterLab and Chromium")
    deadline = driver.Deadline(min(120.0, browser_budget.left()))
    index_text, api_text = (lab_root / "docs" / "README.md").read_text(), (lab_root / "docs" / "API.md").read_text()
    context = chromium.browser.new_context()
    try:
        page = context.new_page()
        page.goto(lab.url("docs"), wait_until="domcontentloaded", timeout=deadline.ms(90))
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=deadline.ms(60))
        page.evaluate(OPEN, "docs/README.md")
        index = _shown(page, "docs/README.md", deadline)
        assert headings(index_text, 1) == index["headings"], index

        # every page the index lists in docs/ is served, the reference among them with the text make docs wrote
        served = {url.split("/files/", 1)[1].split("?", 1)[0]: url for url in index["links"] if "/files/docs/" in url}
        assert "docs/API.md" in served, index["links"]
        for path, url in served.items():
            assert page.request.get(url).status == 200, path
        assert page.request.get(served["docs/API.md"]).text() == api_text

        # following the link, as a reader clicks it, opens the reference rendered
        page.locator(".jp-RenderedMarkdown a[href*='/files/docs/API.md']").first.click(timeout=deadline.ms(30))
        api = _shown(page, "docs/API.md", deadline)
        assert api["headings"] == headings(api_text, 1) + headings(api_text, 2), api["headings"][:5]

        # and its first area's link opens that page of the reference, rendered
        area = f"docs/api/{next(iter(docs.AREAS))}.md"
        area_text = (lab_root / area).read_text()
        page.locator(f".jp-RenderedMarkdown a[href*='/files/{area}']").first.click(timeout=deadline.ms(30))
        shown = _shown(page, area, deadline)
        assert shown["headings"] == headings(area_text, 1) + headings(area_text, 2), shown["headings"][:5]
    finally:
        context.close()
