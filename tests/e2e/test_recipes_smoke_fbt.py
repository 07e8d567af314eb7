"""Two of the FBT studies at smoke scale (``test_recipes_smoke.HEAVY`` but its ``LONGEST``), in a file of their own
so that they run on another pytest-xdist worker than the other recipes (``--dist loadfile`` keeps a file on one
worker)."""

from __future__ import annotations

import pytest
from test_recipes_smoke import HEAVY, LONGEST, check_recipe


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in HEAVY if name != LONGEST])
def test_fbt_recipe_smoke(tmp_path, name):
    check_recipe(tmp_path, name)
