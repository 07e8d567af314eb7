"""The longest FBT study at smoke scale (``test_recipes_smoke.LONGEST``), alone in its file: with ``--dist
loadfile`` it would otherwise hold one worker through the other two FBT studies as well (about 20 minutes)."""

from __future__ import annotations

import pytest
from test_recipes_smoke import HEAVY, LONGEST, check_recipe


@pytest.mark.slow
def test_longest_recipe_smoke(tmp_path):
    assert LONGEST in HEAVY
    check_recipe(tmp_path, LONGEST)
