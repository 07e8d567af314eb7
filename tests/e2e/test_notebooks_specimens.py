"""Every shipped run a notebook or a page names is one the specimens index (docs/SPECIMENS.md) lists, under that one
name: a notebook cannot teach on, and METHODS.md, RESULTS.md or the docs cannot cite, a run that was renamed,
retrained away or never shipped."""

from __future__ import annotations

import ast
import functools
import itertools
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LITERAL = re.compile(r"""["']([a-z][a-z0-9_.]*)["']""")
SEEDED = re.compile(r"_s\d+$")  # how a recipe names a seed's run
SHIPPED = {p.parent.name for p in (ROOT / "checkpoints").glob("*/*/config.json")}
INDEXED = set(re.findall(r"^\| ([a-z][a-z0-9_.]*) \| ", (ROOT / "docs" / "SPECIMENS.md").read_text(), re.M))
PAGES = [ROOT / "README.md", ROOT / "RESULTS.md", ROOT / "notebooks" / "METHODS.md",
         *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "SPECIMENS.md")]
SEEDED_WORD = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*_s\d+)(?!\w)")  # a seed's run named in prose
QUOTED = re.compile(r"`([a-z][a-z0-9_.]*)`")


def named_runs(path: Path) -> set[str]:
    """The string literals of a notebook's code that name a run: a shipped run's name, or any name ending in a
    seed (``_s0``), shipped or not."""
    cells = json.loads(path.read_text())["cells"]
    literals = {m for c in cells if c["cell_type"] == "code" for m in LITERAL.findall("".join(c["source"]))}
    return {name for name in literals if name in SHIPPED or SEEDED.search(name)}


def named_in_prose(text: str) -> set[str]:
    """The runs a page's text names: any word ending in a seed (``_s0``), or a shipped run's name in backticks."""
    return set(SEEDED_WORD.findall(text)) | {name for name in QUOTED.findall(text) if name in SHIPPED}


def prose_of(path: Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_a_notebook_names_only_indexed_runs(path):
    assert not named_runs(path) - INDEXED, f"{path.name} names runs the specimens index does not list"
    assert not named_in_prose(prose_of(path)) - INDEXED, f"{path.name}'s text names runs the index does not list"


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_a_page_names_only_indexed_runs(path):
    assert not named_in_prose(prose_of(path)) - INDEXED, f"{path.name} names runs the specimens index does not list"


def test_the_check_sees_the_runs_notebooks_teach_on(tmp_path):
    """The instrument detects what it guards: notebook 04's specimen is found, and a notebook naming a run that
    was never shipped is caught."""
    assert "glu_full_s0" in named_runs(ROOT / "notebooks" / "04_fbt_latent_feedback.ipynb") <= INDEXED
    notebook = tmp_path / "renamed.ipynb"
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "source": [
        'model = wb.experiments.load_run("fbt_text", "glu_full_s9")\n', 'label = "text_fbt"']}]}))
    assert named_runs(notebook) - INDEXED == {"glu_full_s9"}
    assert named_in_prose("the paper's arm, `glu_full_s0`, and glu_full_s9 (seed 9); not runs/x_s1.csv or "
                          "`fbt_text`") - INDEXED == {"glu_full_s9"}
    assert "delayed_memory_fbt_s1" in named_in_prose(prose_of(ROOT / "RESULTS.md")) <= INDEXED


# ---------------------------------------------------------------------------------------------- (recipe, run) pairs
LOADERS = {"load_run", "run_metrics", "run_history"}  # wb.experiments' calls that take (recipe, run)
INDEX_LINK = "../docs/SPECIMENS.md"


@functools.cache
def indexed_pairs() -> frozenset[tuple[str, str]]:
    from workbench.experiments.results_page import shipped_summaries
    from workbench.experiments.results_table import specimens_table

    table = specimens_table(shipped_summaries())
    return frozenset(zip(table["recipe"], table["run"]))


def _value(node: ast.AST, env: dict) -> object:
    """``node`` evaluated from literals and the notebook's literal-valued names only (no builtins, no calls but a
    literal's own methods); raises when it needs anything else."""
    return eval(compile(ast.Expression(node), "<cell>", "eval"), {"__builtins__": {}}, dict(env))


def _bind(target: ast.AST, value: object) -> dict:
    if isinstance(target, ast.Name):
        return {target.id: value}
    if isinstance(target, ast.Tuple) and isinstance(value, tuple) and len(value) == len(target.elts):
        return {k: v for t, x in zip(target.elts, value) for k, v in _bind(t, x).items()}
    raise ValueError("an unpacking the reader does not follow")


def loaded_pairs(path: Path) -> tuple[set[tuple[str, str]], list[str]]:
    """The (recipe, run) pairs a notebook's code passes to load_run / run_metrics / run_history, read without
    running it: literal arguments, names the notebook assigns a literal (a string, a list, a dict, a
    comprehension over literals), and loop or comprehension variables over such a name. Returns the pairs, and
    the source of each call whose arguments depend on anything else (a recipe's summary, a helper's result)."""
    env: dict = {}
    pairs, unread = set(), []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        tree = ast.parse("\n".join(line for line in lines if not line.lstrip().startswith(("%", "!"))))
        for statement in tree.body:  # the cell's literal-valued names, in order
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                try:
                    env |= _bind(statement.targets[0], _value(statement.value, env))
                except Exception:  # not a literal: forget a name it rebinds
                    for name in ast.walk(statement.targets[0]):
                        if isinstance(name, ast.Name):
                            env.pop(name.id, None)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for call in ast.walk(tree):
            func = getattr(call, "func", None)
            name = getattr(func, "attr", getattr(func, "id", None))
            if not isinstance(call, ast.Call) or name not in LOADERS or len(call.args) < 2:
                continue
            loops, node = [], call
            while node in parents:  # the comprehensions and for loops around the call
                node = parents[node]
                if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                    loops += [(g.target, g.iter) for g in node.generators]
                elif isinstance(node, ast.For):
                    loops.append((node.target, node.iter))
            try:
                iterables = [list(_value(it, env)) for _, it in loops]
                found = set()
                for values in itertools.product(*iterables):
                    local = dict(env)
                    for (target, _), value in zip(loops, values):
                        local |= _bind(target, value)
                    recipe, run = (_value(a, local) for a in call.args[:2])
                    found.add((recipe, run))
                pairs |= found
            except Exception:
                unread.append(ast.unparse(call))
    return pairs, unread


LOADING = [p for p in NOTEBOOKS if loaded_pairs(p)[0] or loaded_pairs(p)[1]]


@pytest.mark.parametrize("path", LOADING, ids=[p.name for p in LOADING])
def test_every_specimen_a_notebook_loads_is_an_indexed_run_and_linked(path):
    """Every (recipe, run) a notebook loads is a row of the specimens index, that very recipe's run (two recipes
    may each ship a run of one name); and the notebook links the index for the reader."""
    unlisted = sorted(loaded_pairs(path)[0] - indexed_pairs())
    assert not unlisted, f"{path.name} loads runs the index does not list: {unlisted}"
    assert INDEX_LINK in prose_of(path), f"{path.name} loads shipped specimens but does not link {INDEX_LINK}"
    assert (path.parent / INDEX_LINK).resolve().is_file()


def test_the_pair_reader_follows_literals_names_and_loops(tmp_path):
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ['m = wb.experiments.load_run("fbt_text", "glu_full_s0")\n',
                                         'registers = "fbt_pass_mixes_registers"\n',
                                         'specs = {"a": "reg_75_25_s0", "b": "reg_75_25_s9"}\n',
                                         'more = {f"add s{s}": f"reg_add_75_22_3_s{s}" for s in (0, 1)}\n']},
        {"cell_type": "code", "source": ['ms = {k: wb.experiments.load_run(registers, r) for k, r in specs.items()}\n',
                                         'for k, run in more.items():\n',
                                         '    wb.experiments.run_metrics("fixed_point_study", run)\n',
                                         'x = wb.experiments.load_run("fbt_text", summary["runs"][0])\n']}]}))
    pairs, unread = loaded_pairs(notebook)
    assert pairs == {("fbt_text", "glu_full_s0"), ("fbt_pass_mixes_registers", "reg_75_25_s0"),
                     ("fbt_pass_mixes_registers", "reg_75_25_s9"), ("fixed_point_study", "reg_add_75_22_3_s0"),
                     ("fixed_point_study", "reg_add_75_22_3_s1")}
    assert pairs - indexed_pairs() == {("fbt_pass_mixes_registers", "reg_75_25_s9")}
    assert unread == ['wb.experiments.load_run(\'fbt_text\', summary[\'runs\'][0])']
    # a run of one name under the recipe that does not ship it is not indexed
    assert ("fbt_text", "reg_75_22_3_s0") not in indexed_pairs()


# ---------------------------------------------------------------------------------------------- arm labels
def test_study_arm_labels_are_tied_to_their_runs_on_first_use():
    """Where a notebook shows one of fixed_point_study's arm labels (``fbt_glu``, ``fbt_additive``, ...), in its
    text or in an output, a markdown cell at or before that first appearance names the index's runs of that arm."""
    from workbench.experiments.recipes import fixed_point_study

    study = sorted(run for recipe, run in indexed_pairs() if recipe == "fixed_point_study")
    missing = []
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        for label, pattern in fixed_point_study.SHIPPED.items():
            if "_" not in label:  # "lrt" is a word of the prose too
                continue
            stem = pattern.split("{")[0]  # "reg_75_22_3_s{s}" -> the runs reg_75_22_3_s0, reg_75_22_3_s1
            runs = [r for r in study if r.startswith(stem) and re.fullmatch(r"(_s)?\d*", r[len(stem):])]
            word = re.compile(rf"(?<![\w]){label}(?![\w])")
            first = next((i for i, c in enumerate(cells)
                          if word.search("".join(c["source"]) + json.dumps(c.get("outputs", [])))), None)
            if first is None:
                continue
            said = any(c["cell_type"] == "markdown" and word.search("".join(c["source"]))
                       and all(r in "".join(c["source"]) for r in runs) for c in cells[:first + 1])
            if not said:
                missing.append(f"{path.name}: {label} ({', '.join(runs)})")
    assert not missing, f"arm labels shown before the text says which runs they are: {missing}"
