"""``make docs``: the API reference is the package's own names and docstrings, every config field is documented,
and the committed pages (RESULTS.md, SPECIMENS.md) are what the stored results write now."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tools import docs
from workbench.config import ModelConfig
from workbench.train_config import TrainConfig


@pytest.fixture(scope="module")
def api() -> str:
    return docs.api_markdown()


def test_the_reference_documents_every_public_name_and_no_private_one(api):
    sections = {s.split("\n", 1)[0]: s for s in api.split("\n## ")[1:]}
    modules = docs.public_modules()
    assert [m.__name__ for m in modules] == [name for name in sections if name != "Modules"]
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


def test_signatures_read_as_written():
    def f(a: int, *, b: str | None = None) -> list[int]:
        return []

    assert docs.signature(f) == "(a: int, *, b: str | None = None) -> list[int]"
    wrapped = docs.signature(f, width=10)
    assert wrapped.splitlines() == ["(", "    a: int,", "    *, b: str | None = None,", ") -> list[int]"]


def test_the_committed_pages_are_what_the_stored_results_write():
    """RESULTS.md and SPECIMENS.md change only with the stored results; the API reference is generated on demand
    (``make docs``, not committed), so a docstring edit is never a test edit."""
    stale = [path.name for path, text in docs.generated().items()
             if path != docs.API and (not path.is_file() or path.read_text() != text)]
    assert not stale, f"{stale} differ from what the code writes: run make docs"
