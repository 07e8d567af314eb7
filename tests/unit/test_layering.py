"""Layers that only point down: no module of ``workbench/`` imports a module of a higher layer.

Every module is parsed (``ast``, nothing is imported) and every ``import`` statement in it counts,
wherever it stands: at the top, inside a function (the lazy imports that keep matplotlib and
ipywidgets off the import path) or under ``TYPE_CHECKING``. A module may import its own layer and
the layers below it. The order, lowest first, is what the code needs, not a wish:

1. **base**: ``_version``, ``validation``, ``config``, ``hooks``, ``kv_cache``, ``metrics``, ``store``, ``stats``,
   ``functional`` and the ``tasks`` package need nothing of the package but each other: the
   vocabulary every layer above speaks (configs, hook points, the KV-store protocol, losses, the
   backbone's norm, rotary and init, data).
2. **mechanisms**: where the memory is read and consumed (config and hook points).
3. **model**: the backbone carries a mechanism and a KV store.
4. **schedules**: how a sequence is computed, by calling the model's steps.
5. **model users**: ``decode`` and ``evaluation`` run schedules; ``train_config`` validates schedule
   names; ``checkpoint`` builds models (and stamps ``_version``, not the package, into them);
   ``optim`` groups a model's parameters per ``TrainConfig``; ``hf`` wraps a Hugging Face model as
   a feedback model and loads checkpoints; ``run_dir`` (a run directory's lock, history and stored
   config) reads checkpoints and configs, never a step.
6. **train**: the trainer runs schedules on a model and keeps its run directory (``run_dir``); it
   draws nothing (the train command hands it ``plots.LossFigure`` as a callback, a notebook
   ``widgets.live.LiveLossPlot``), so nothing it imports is above the model users.
7. **analysis**: measurements on a model (caches, probes, interventions, contraction, traces), all
   of them plain data.
8. **figures**: ``plots`` (one module per subject) draws that data (it reads decode's regime names
   and the schedules' knob letters) and ``diagrams`` draws the schedules' rules with it.
9. **experiments**: recipes train (``train``), measure (``analysis``) and draw (``plots``); the
   results page and compute accounting the notebooks read (``results_table``) read what recipes
   wrote, so they live here too.
10. **notebook front-ends**: ``widgets`` show experiments, analyses and figures. (The exercise checks are the
    course's, not the package's: ``notebooks/exercises`` imports ``workbench`` as a notebook does.)
11. **entry points**: ``bench``, ``cli`` (one module per family of commands), ``__main__`` and the package
    ``__init__`` (the facade ``import workbench as wb`` gives) may import anything; nothing imports them, which is why a
    module below takes ``__version__`` from ``_version`` and not from the package.

A new module has to be placed in a layer here (the first test fails until it is), which is the
point: where it goes is decided once, by what it imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "workbench"

# lowest first; a name covers a module, or a package and everything under it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("workbench._version", "workbench.validation", "workbench.config", "workbench.hooks", "workbench.fast",
              "workbench.kv_cache", "workbench.metrics", "workbench.functional", "workbench.tasks",
              "workbench.files", "workbench.store", "workbench.stats")),
    ("mechanisms", ("workbench.mechanisms",)),
    ("model", ("workbench.model",)),
    ("schedules", ("workbench.schedules",)),
    ("model users", ("workbench.decode", "workbench.evaluation", "workbench.train_config", "workbench.checkpoint",
                     "workbench.optim", "workbench.hf", "workbench.run_dir")),
    ("train", ("workbench.train",)),
    ("analysis", ("workbench.analysis",)),
    ("figures", ("workbench.plots", "workbench.diagrams")),
    ("experiments", ("workbench.experiments",)),
    ("notebook front-ends", ("workbench.widgets",)),
    ("entry points", ("workbench.cli", "workbench.__main__", "workbench")),
]


def module_name(path: Path) -> str:
    """``workbench/analysis/cache.py`` -> ``workbench.analysis.cache``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(name: str) -> bool:
    return (PACKAGE.parent / name.replace(".", "/") / "__init__.py").is_file()


def is_module(name: str) -> bool:
    return is_package(name) or (PACKAGE.parent / f"{name.replace('.', '/')}.py").is_file()


def layer_of(name: str) -> int | None:
    """Index of the layer whose most specific entry covers ``name`` (the package itself only by its own
    entry); None for a module no layer names."""
    best: tuple[int, int] | None = None  # (length of the matching entry, layer)
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            covers = name == entry or (entry != "workbench" and name.startswith(entry + "."))
            if covers and (best is None or len(entry) > best[0]):
                best = (len(entry), index)
    return None if best is None else best[1]


def imported_modules(source: str, name: str, package: bool) -> list[tuple[int, str]]:
    """(line, module) for every workbench module ``source`` (the module ``name``) imports, anywhere in it.

    ``from X import y`` imports the module ``X.y`` when there is one (a submodule), else ``X``.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                target = f"{origin}.{alias.name}"
                found.append((node.lineno, target if is_module(target) else origin))
    return [(line, m) for line, m in found if m == "workbench" or m.startswith("workbench.")]


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_a_layer():
    missing = [module_name(p) for p in modules() if layer_of(module_name(p)) is None]
    assert not missing, f"place these modules in a layer of LAYERS (by what they import): {missing}"
    entries = [entry for _, group in LAYERS for entry in group]
    assert len(entries) == len(set(entries)), "LAYERS names a module twice"
    assert [e for e in entries if not is_module(e)] == [], "LAYERS names modules that do not exist"


def test_imports_point_down():
    upward = set()
    for path in modules():
        name = module_name(path)
        own = layer_of(name)
        for line, target in imported_modules(path.read_text(), name, path.name == "__init__.py"):
            if layer_of(target) > own:
                upward.add(f"{path.relative_to(PACKAGE.parent)}:{line}: {name} ({LAYERS[own][0]}) imports "
                              f"{target} ({LAYERS[layer_of(target)][0]})")
    assert not upward, "imports of a higher layer:\n" + "\n".join(sorted(upward))


@pytest.mark.parametrize("source, name, package, expected", [
    ("from . import schedules, tasks", "workbench.train", False, ["workbench.schedules", "workbench.tasks"]),
    ("from .. import __version__", "workbench.experiments.runner", False, ["workbench"]),
    ("from .._version import __version__", "workbench.experiments.runner", False, ["workbench._version"]),
    ("from .core import Explorer", "workbench.widgets", True, ["workbench.widgets.core"]),
    ("def f():\n    from ..plots import loss_curves\n", "workbench.widgets.live", False, ["workbench.plots"]),
    ("import workbench.tasks as tasks\nimport torch", "workbench.cli", False, ["workbench.tasks"]),
])
def test_the_parser_resolves_relative_and_lazy_imports(source, name, package, expected):
    """The check is only as good as its reading of imports: relative levels, packages, submodules, lazy."""
    assert [m for _, m in imported_modules(source, name, package)] == expected


def test_layers_cover_subpackages_and_put_the_package_facade_on_top():
    assert layer_of("workbench.tasks.text") == 0 and layer_of("workbench.experiments.recipes.schedules") == 8
    assert layer_of("workbench") == len(LAYERS) - 1 and layer_of("workbench.nonexistent") is None


@pytest.mark.subprocess
def test_import_workbench_loads_no_heavy_optional_library():
    """``import workbench`` (a script that trains or decodes) loads neither scikit-learn nor the plotting stack:
    the probes import scikit-learn on first use, plots and widgets are lazy attributes."""
    import subprocess
    import sys

    code = ("import sys, workbench; print(','.join(m for m in ('sklearn', 'matplotlib', 'seaborn', 'ipywidgets') "
            "if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "", f"import workbench loaded {loaded}"


SCHEDULE_TYPES = {"Schedule", "Single", "Sequential", "Multipass", "Interleaved", "Blockwise", "FixedPoint", "PassMix",
                  "Prefilled"}


def schedule_type_checks(source: str) -> list[int]:
    """Lines of ``source`` whose ``isinstance`` asks whether something is a (particular) schedule."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2:
            names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} \
                | {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
            if names & SCHEDULE_TYPES:
                lines.append(node.lineno)
    return lines


def test_only_the_schedules_module_branches_on_a_schedules_type():
    """What differs between schedules is the values' own methods (``reads``, ``prefill``, ``draw``,
    ``final_passes``, ...): a module that asks ``isinstance(value, schedules.X)`` re-implements one."""
    assert schedule_type_checks("isinstance(s, schedules.PassMix)\nisinstance(s, (int, Single))\nisinstance(s, str)") \
        == [1, 2]
    found = {f"{module_name(p)}:{line}" for p in modules() if PACKAGE / "schedules" not in p.parents
             for line in schedule_type_checks(p.read_text())}
    assert not found, f"isinstance on a schedule outside workbench/schedules/: {sorted(found)}"


def private_imports(source: str, name: str, package: bool) -> list[tuple[int, str]]:
    """(line, ``module.name``) for every private name ``source`` imports from another workbench module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = name.split(".") if package else name.split(".")[:-1]
            origin = (".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
                      if node.level else node.module or "")
            if not (origin == "workbench" or origin.startswith("workbench.")) or origin == name:
                continue
            found += [(node.lineno, f"{origin}.{alias.name}") for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_names():
    """A private name is a module's own business; what another module needs is public API (``_version`` is a
    module, and ``from .store import find_version as _find_version`` imports a public name)."""
    assert private_imports("from ..analysis.traces import _read\nfrom .x import y as _y", "workbench.a.b", False) \
        == [(1, "workbench.analysis.traces._read")]
    found = [f"{module_name(p)}:{line} {what}" for p in modules()
             for line, what in private_imports(p.read_text(), module_name(p), p.name == "__init__.py")
             if what != "workbench._version.__version__"]
    assert not found, found


def test_no_recipe_imports_the_runner_or_another_recipe():
    """What two recipes share lives in a module of ``experiments`` (``common``, ``text_arms``, ``pass_mix_study``,
    ``probe_specimens``), not in one of the recipes."""
    recipes = "workbench.experiments.recipes"
    found = set()
    for path in modules():
        name = module_name(path)
        if not name.startswith(recipes + ".") or path.name == "__init__.py":
            continue
        for line, target in imported_modules(path.read_text(), name, False):
            assert target != "workbench.experiments.runner", f"{name}:{line} imports the runner"
            if target.startswith(recipes + ".") and target != name:
                found.add((name.rsplit(".", 1)[1], target[len(recipes) + 1:].split(".")[0]))
    assert not found, sorted(found)
