"""``make docs``: the API reference is the package's own names and docstrings, every config field is documented,
the committed pages (RESULTS.md, SPECIMENS.md, the index of docs/) are what the code writes now, and no relative
link between the pages names a missing file."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tools import docs
from workbench.config import ModelConfig
from workbench.train_config import TrainConfig


@pytest.fixture(scope="module")
def pages() -> dict:
    return docs.api_pages()


@pytest.fixture(scope="module")
def api(pages) -> str:
    """The area pages, one after another (the contents page holds no module's section)."""
    return "\n".join(text for path, text in pages.items() if path != docs.API)


def test_the_reference_documents_every_public_name_and_no_private_one(api):
    sections = {s.split("\n", 1)[0]: s for s in api.split("\n## ")[1:]}
    modules = docs.public_modules()
    assert sorted(m.__name__ for m in modules) == sorted(sections) and len(sections) == api.count("\n## ")
    assert "workbench" in sections and "workbench.config" in sections and "workbench.experiments" in sections
    for module in modules:
        names = docs.public_names(module)
        assert names or not hasattr(module, "__all__"), module.__name__
        for name in names:
            assert f"`{name}`" in sections[module.__name__], (module.__name__, name)
    assert not any(name.split(".")[-1].startswith("_") for name in sections)
    assert not re.search(r"^### `_", api, re.M) and " at 0x" not in api


def test_every_config_field_is_documented_in_order(api):
    """The ``Attributes:`` section of each config class names its fields, in their order, each with a text, and
    the reference shows them under the class."""
    for cls in (ModelConfig, TrainConfig):
        items = docs.attributes(cls)
        assert [re.match(r"- `(\w+)`: \S", item)[1] for item in items] == [f.name for f in dataclasses.fields(cls)]
        assert "\n".join(items) in api.split(f"### `{cls.__name__}`", 1)[1]


def test_each_area_has_a_page_its_modules_and_the_contents_link_to(pages):
    """Every public module is on its area's page, and the contents page links each area and each module there."""
    assert set(pages) == {docs.API, *(docs.area_page(area) for area in docs.AREAS)}
    for module in docs.public_modules():
        page = docs.area_page(docs.area_of(module.__name__))
        assert f"\n## {module.__name__}\n" in pages[page], module.__name__
        assert f"(api/{page.name}#{module.__name__.replace('.', '')})" in pages[docs.API], module.__name__
    assert docs.area_of("workbench.schedules.values") == "schedules" and docs.area_of("workbench") == "model"
    assert docs.area_of("workbench.train_config") == "training" and docs.area_of("workbench.hf.wrapper") == "hf"
    with pytest.raises(ValueError, match="module_name"):
        docs.area_of("elsewhere.module")


def test_a_name_documented_on_another_page_links_there(pages):
    """``workbench`` re-exports ``TrainConfig``: its pointer on the model page leads to the training page."""
    assert "[`workbench.train_config`](training.md#workbenchtrain_config)" in pages[docs.area_page("model")]


def test_signatures_read_as_written():
    def f(a: int, *, b: str | None = None) -> list[int]:
        return []

    assert docs.signature(f) == "(a: int, *, b: str | None = None) -> list[int]"
    wrapped = docs.signature(f, width=10)
    assert wrapped.splitlines() == ["(", "    a: int,", "    *, b: str | None = None,", ") -> list[int]"]


def test_the_committed_pages_are_what_the_stored_results_write():
    """RESULTS.md and SPECIMENS.md change only with the stored results, the index only with ``docs.PAGES``; the API
    reference is generated on demand (``make docs``, not committed), so a docstring edit is never a test edit."""
    stale = [path.name for path, text in docs.generated().items()
             if not docs._built(path) and (not path.is_file() or path.read_text() != text)]
    assert not stale, f"{stale} differ from what the code writes: run make docs"


def test_every_relative_link_names_a_file_and_every_page_of_docs_is_indexed(pages):
    """What ``make docs`` fails on besides a stale page, on the pages as committed and the reference as written."""
    texts = docs.read_pages({**pages, docs.INDEX: docs.index_markdown()}, docs.ROOT)
    assert {docs.ROOT / "README.md", docs.ROOT / "RESULTS.md", docs.INDEX, *pages} <= set(texts)
    assert docs.dead_links(texts, docs.ROOT) + docs.unlisted(texts, docs.ROOT) == []


def test_a_link_to_no_file_and_a_page_missing_from_the_index_are_named(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "fig 1.png").write_bytes(b"")
    (tmp_path / "docs" / "NOTES.md").write_text("# Notes\n\n[back](../README.md#top)\n")
    (tmp_path / "README.md").write_text(
        "[notes](docs/NOTES.md) [gone](docs/GONE.md) [out](../elsewhere.md) [web](https://example.org/x.md) "
        "[here](#top)\n```\n[in a code block](docs/CODE.md)\n```\n`[in a span](docs/SPAN.md)` "
        "![figure](docs/fig%201.png) [api](docs/API.md#workbench)\n")
    pages = {tmp_path / "docs" / "API.md": "# API\n", tmp_path / "docs" / "README.md": "[api](API.md)\n"}  # not on disk
    texts = docs.read_pages(pages, tmp_path)
    dead = docs.dead_links(texts, tmp_path)
    assert len(dead) == 2 and "(docs/GONE.md)" in dead[0] and "(../elsewhere.md)" in dead[1], dead
    missing = docs.unlisted(texts, tmp_path)
    assert len(missing) == 1 and missing[0].startswith("docs/NOTES.md "), missing


def test_make_docs_writes_what_check_then_passes_and_check_names_what_is_stale(tmp_path, monkeypatch, capsys):
    """A clone (no reference, pages missing) fails the check on the committed pages only; ``make docs`` writes
    them all; a stale reference a build left then fails it, and a broken link fails even the writing run."""
    api, index, results = tmp_path / "docs" / "API.md", tmp_path / "docs" / "README.md", tmp_path / "RESULTS.md"
    api.parent.mkdir()
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    monkeypatch.setattr(docs, "BUILT", (api,))
    monkeypatch.setattr(docs, "PAGES", {"API.md": "the reference", "USAGE.md": "how"})
    monkeypatch.setattr(docs, "generated", lambda: {api: "# API\n", index: "[API](API.md)\n", results: "# Results\n"})

    assert docs.main(["--check"]) == 1
    named = capsys.readouterr().err
    assert "docs/README.md" in named and "RESULTS.md" in named and "API.md" not in named, named
    assert not index.exists()  # the check writes nothing

    assert docs.main([]) == 0 and api.is_file() and index.is_file() and results.is_file()
    assert docs.main(["--check"]) == 0
    capsys.readouterr()

    api.write_text("# API as an older build wrote it\n")
    assert docs.main(["--check"]) == 1 and "docs/API.md" in capsys.readouterr().err

    (tmp_path / "docs" / "USAGE.md").write_text("[renamed](CLI.md)\n")
    assert docs.main([]) == 1 and "(CLI.md)" in capsys.readouterr().err
    assert api.read_text() == "# API\n"  # still written


# where a snippet of the README or docs/ writes: train --out DIR, out_dir=..., save_checkpoint(model, DIR), ...
WRITES = re.compile(r"""--out[ =](\S+)|out_dir\s*=\s*["']([^"']+)|save_checkpoint\([^,]+,\s*["']([^"']+)"""
                    r"""|save_pretrained\(\s*["']([^"']+)|write_\w+\([^)]*?["']([^"']+)""")


def written_paths(markdown: str) -> list[str]:
    """The output paths the fenced code blocks of ``markdown`` name (prose outside code blocks is not run)."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S)
    return [next(g for g in m.groups() if g) for block in blocks for m in WRITES.finditer(block)]


def test_no_snippet_a_reader_copies_writes_into_the_shipped_checkpoints():
    """A reader who runs the README's or a docs page's snippets must not overwrite a specimen: every output they
    name lies outside checkpoints/ (a scratch folder such as runs/)."""
    pages = [docs.ROOT / "README.md", *sorted(docs.DOCS.glob("*.md"))]
    found = {page.name: written_paths(page.read_text()) for page in pages}
    assert sum(map(len, found.values())) >= 4, found  # the matcher still sees the snippets' outputs
    inside = {name: [p for p in paths if p.strip("./").startswith("checkpoints")] for name, paths in found.items()}
    assert not any(inside.values()), inside


def test_a_snippet_writing_into_checkpoints_is_found():
    page = "```python\nwb.save_checkpoint(model, 'checkpoints/demo')\n```\n```bash\ntrain --out ./checkpoints/x\n```"
    assert written_paths(page) == ["checkpoints/demo", "./checkpoints/x"]
    assert written_paths("`--out checkpoints/x` in prose") == []
