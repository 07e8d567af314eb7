"""RESULTS.md and docs/SPECIMENS.md as the shipped summaries make them: each recipe's summary before any table,
no table cell over ``MAX_CELL`` characters, every stored number as stored, every shipped run indexed with its task."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from workbench.checkpoint import load_config, load_metrics
from workbench.experiments import checkpoints_root, results_page, shipped_summaries
from workbench.experiments.results_table import specimens_table

SUMMARY = ("Claim", "Setting", "Gates", "Number", "Verdict", "In one sentence")


def _cells(text: str) -> list[str]:
    """Every cell of every Markdown table row in ``text`` (an escaped ``\\|`` stays inside its cell)."""
    return [cell.strip() for line in text.splitlines() if line.startswith("|")
            for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {"RESULTS.md": results_page.results_markdown(), "SPECIMENS.md": results_page.specimens_markdown()}


def test_no_table_cell_is_longer_than_the_limit(pages):
    for name, text in pages.items():
        longest = max(_cells(text), key=len)
        assert len(longest) <= results_page.MAX_CELL, (name, longest[:80])


def test_each_recipe_opens_with_its_summary_before_any_table(pages):
    sections = pages["RESULTS.md"].split("\n## ")[1:]
    assert [s.split("\n", 1)[0] for s in sections] == list(shipped_summaries())
    for section in sections:
        first_table = section.index("\n|")
        starts = [section.find(f"\n- **{label}**: ") for label in SUMMARY]
        assert 0 < starts[0] and starts == sorted(starts) and starts[-1] < first_table, section[:60]


def test_every_stored_number_and_verdict_is_on_the_page(pages):
    for name, summary in shipped_summaries().items():
        section = pages["RESULTS.md"].split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert summary["number"] in section and summary["verdict"] in section, name
        for e in summary.get("extensions", []):
            assert e["number"] in section, (name, e["name"])


def test_a_long_cell_moves_to_a_note_under_its_table(tmp_path):
    """A number too long for a cell is written in full below the table, the cell pointing to it."""
    root = tmp_path / "checkpoints"
    shutil.copytree(checkpoints_root() / "lrt_memory_sanity", root / "lrt_memory_sanity")
    summary_path = root / "lrt_memory_sanity" / "summary.json"
    summary = json.loads(summary_path.read_text())
    long_number = "; ".join(f"arm {i}: +0.{i:04d} bits/byte [-0.1, +0.2, 3 seeds]" for i in range(20))
    summary["extensions"] = [{"name": "a long one", "verdict": "inconclusive", "number": long_number}]
    summary_path.write_text(json.dumps(summary))
    text = results_page.write_results_md(root)
    assert (tmp_path / "RESULTS.md").read_text() == text and len(long_number) > results_page.MAX_CELL
    assert max(map(len, _cells(text))) <= results_page.MAX_CELL
    assert "| a long one | inconclusive | note 1 below |" in text and f"\n1. {long_number}\n" in text
    assert "![lrt_memory_sanity](checkpoints/lrt_memory_sanity/results.png)" in text


def test_the_specimens_index_names_every_shipped_run_and_its_task(pages):
    summaries = shipped_summaries()
    table = specimens_table(summaries)
    assert len(table) == sum(len(s.get("runs", [])) for s in summaries.values())
    root = checkpoints_root()
    for row in table.itertuples():
        config, _ = load_config(root / row.recipe / row.run)
        train = load_metrics(root / row.recipe / row.run)["train_config"]
        assert (row.task, row.seed, row.mechanism) == (train["task"], train["seed"], config.mechanism), row.run
        assert row.shape == f"{config.n_layer}x{config.n_embd}" and row.steps > 0
        assert f"| {row.run} | {row.task} |" in pages["SPECIMENS.md"], row.run


def test_the_specimens_index_gives_each_run_its_held_out_number_and_own_gate(pages):
    """Each run's row carries the number that says whether it learned (bits/byte on text, answer accuracy on a
    task) as its metrics.json has it, and layer0_probes' specimens their own gate's value."""
    table = specimens_table(shipped_summaries()).set_index(["recipe", "run"])
    root = checkpoints_root()
    for (recipe, run), row in table.iterrows():
        metrics = load_metrics(root / recipe / run)
        key = "bpb" if row.task == "text" else "answer_accuracy"
        assert row.held_out == metrics["eval"][key] and row.measure == ("bits/byte" if key == "bpb" else
                                                                         "answer accuracy"), run
    probes = json.loads((root / "layer0_probes" / "summary.json").read_text())["specimens"]
    own = {r["run"]: r for r in probes if r["scratch_updates"] == 0}
    for run, gate in own.items():
        row = table.loc[("layer0_probes", run)]
        assert (row.gate_value, row.gate_passed) == (gate["gate_value"], gate["gated"]), run
        shown = f"| {gate['gate_value']:.3f} {'pass' if gate['gated'] else '**fail**'} |"
        assert any(line.startswith(f"| {run} |") and line.endswith(shown)
                   for line in pages["SPECIMENS.md"].splitlines()), run
    assert table.loc["fbt_text", "gate"].isna().all()
    ungated = set(json.loads((root / "layer0_probes" / "summary.json").read_text())["runs"]) - set(own)
    assert ungated and all(any(line.startswith(f"| {run} |") and line.endswith("| the recipe's (above) |")
                               for line in pages["SPECIMENS.md"].splitlines()) for run in ungated)


def test_specimens_md_links_results_and_refuses_an_empty_root(tmp_path):
    root = tmp_path / "checkpoints"
    shutil.copytree(checkpoints_root() / "lrt_memory_sanity", root / "lrt_memory_sanity")
    text = results_page.specimens_markdown(root)
    assert "](../RESULTS.md#lrt_memory_sanity)" in text and "| sequential_s0 | running_sum |" in text
    with pytest.raises(ValueError, match="root"):
        results_page.specimens_markdown(tmp_path / "empty")
