"""The suite's own scheduling: ``conftest.LONGEST_FIRST`` orders the longest files for pytest-xdist's workers."""

from __future__ import annotations

import conftest


def test_the_longest_first_files_exist():
    """A renamed file would silently fall back to its place in collection order."""
    missing = [name for name in conftest.LONGEST_FIRST if not (conftest.TESTS / name).is_file()]
    assert missing == [] and len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)
