"""The recipes' pre-registered texts live in ``recipes/preregistered.toml``: every table is read, a missing table or
value is an error that names it, and every text a recipe states comes out one line with each placeholder filled."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import workbench
from workbench import experiments as E
from workbench.experiments import core
from workbench.experiments.core import preregistered

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIELDS = ("claim", "setting", "rule", "chance", "caveat", "paper")
TABLES = tomllib.loads(core.PREREGISTERED_FILE.read_text())
# a str.format field left in a text: an escaped {{NAME}} where {NAME} was meant
PLACEHOLDER = re.compile(r"\{[A-Za-z_]\w*(?:\[[^\]]*\]|\.\w+)*(?:![rsa])?(?::[^{}]*)?\}")


def test_every_table_is_read_by_a_recipe_or_module_and_every_recipe_has_one():
    package = Path(workbench.__file__).parent
    read = {m for path in package.rglob("*.py")
            for m in re.findall(r"""preregistered\(\s*["'](\w+)["']""", path.read_text())}
    assert sorted(TABLES) == sorted(read)  # no orphan table, no call to a missing one
    assert set(E.RECIPES) <= set(TABLES)


def test_tables_hold_only_a_recipes_texts():
    for name, table in TABLES.items():
        assert table and set(table) <= set(FIELDS), name
        assert all(isinstance(text, str) and text for text in table.values()), name


def test_a_missing_table_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"name='no_such_recipe' is invalid"):
        preregistered("no_such_recipe")


def test_a_missing_value_is_a_value_error_naming_its_table():
    with pytest.raises(ValueError, match=r"preregistered\('lrt_vs_baseline'\): \[lrt_vs_baseline\] setting needs"):
        preregistered("lrt_vs_baseline")


@pytest.mark.parametrize("name", list(E.RECIPES))
def test_every_recipe_text_is_one_line_with_its_placeholders_filled(name):
    recipe = E.RECIPES[name]
    for field in FIELDS:
        text = getattr(recipe, field)
        assert "\n" not in text and text == text.strip(), (name, field)
        assert not PLACEHOLDER.search(text), (name, field, PLACEHOLDER.search(text))


def test_the_texts_ship_as_package_data():
    pyproject = tomllib.loads((Path(workbench.__file__).parents[1] / "pyproject.toml").read_text())
    data = pyproject["tool"]["setuptools"]["package-data"]["workbench.experiments.recipes"]
    assert any(core.PREREGISTERED_FILE.match(pattern) for pattern in data)
