"""Every control of every explorer is moved by some test: a widget whose control no test moves could be wired
to nothing and every test would still pass. Read from the sources: each explorer factory's control names
(its ``controls`` dict) against the tests that call the factory and set ``controls["name"].value``."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import workbench.widgets as W

TESTS = Path(__file__).resolve().parents[2]


def _test_functions() -> dict[str, str]:
    found = {}
    for path in TESTS.rglob("test_*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                found[f"{path.relative_to(TESTS)}::{node.name}"] = ast.get_source_segment(text, node)
    return found


FACTORIES = [name for name in W.__all__ if inspect.isfunction(getattr(W, name))
             and "Explorer" in str(inspect.signature(getattr(W, name)).return_annotation)]


def controls_of(factory: str) -> set[str]:
    """The control names a factory builds: the keys of its ``controls`` dict and keys it adds later."""
    source = inspect.getsource(getattr(W, factory))
    return (set(re.findall(r'"(\w+)":\s*(?:widgets\.|_slider)', source))
            | set(re.findall(r'controls\["(\w+)"\]\s*=\s*widgets\.', source)))


def test_the_audit_sees_every_explorer_and_its_controls():
    assert len(FACTORIES) >= 10 and "schedule_explorer" in FACTORIES
    assert controls_of("schedule_explorer") == {"passes", "subsets", "block"}


@pytest.mark.parametrize("factory", FACTORIES)
def test_every_control_of_the_explorer_is_moved_by_a_test(factory):
    tests = _test_functions()
    using = {name: src for name, src in tests.items() if re.search(rf"\b{factory}\(", src)}
    assert using, f"no test builds {factory}"
    unmoved = sorted(c for c in controls_of(factory)
                     if not any(re.search(rf'controls\["{c}"\]\.value\s*=', src) for src in using.values()))
    assert not unmoved, f"{factory}: no test moves {unmoved} (tests building it: {sorted(using)})"
