"""Committed notebooks cannot go stale: every verdict, number and recipe row a notebook's saved outputs show
agrees with the recipes' current ``checkpoints/*/summary.json``.

nbval (``--nbval-lax``) compares only the cells marked ``NBVAL_CHECK_OUTPUT``; a recipe retrained since a
notebook was executed leaves the notebook showing the old verdict, and nothing else would say so. This
reads the outputs as committed:

- a ``verdict: ...`` or ``number: ...`` line must be a current recipe's verdict or number, verbatim;
- a table row or line naming one recipe and a verdict word must hold that recipe's current verdict (in
  full where the output is HTML; its first words where pandas' text form cuts it);
- a line naming several recipes under one verdict word (``not tested (a gate failed): a, b``) must list
  exactly the recipes whose verdict starts so;
- a "What we found" row (the findings table) or printed finding (``recipe: verdict`` then its sentence,
  indented) must be the recipe's current finding, word for word: its number and sentence, not only its
  verdict;
- notebook 08, the results notebook, shows every recipe's current verdict.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from workbench.experiments import findings_table
from workbench.experiments.core import short_verdict

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SUMMARIES = {p.parent.name: json.loads(p.read_text()) for p in sorted((ROOT / "checkpoints").glob("*/summary.json"))}
PHRASE = re.compile(r"does not reproduce|reproduces|inconclusive|not tested|mixed|does not use")
NAMES = sorted(SUMMARIES, key=len, reverse=True)
TABLE = findings_table(SUMMARIES) if SUMMARIES else None
FINDINGS = TABLE[TABLE["kind"] != "extension"].set_index("recipe") if SUMMARIES else None
# the rule applied beyond a paper's claim: rows of their own, keyed by recipe and what the claim is extended to
EXTENSIONS = ({(r.recipe, r.paper): r for r in TABLE[TABLE["kind"] == "extension"].itertuples()} if SUMMARIES
              else {})
EXTENDED = re.compile(r"^(\S+) \[(beyond the claim: .*?)\]: (.*)\n((?:  .*\n?)+)", re.M)
RECIPE = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, NAMES)) + r")(?![\w])")


def rows(nb: dict) -> list[tuple[list[str], bool]]:
    """The cells of every table row (HTML) and every line (one cell) of the code cells' outputs, and
    whether the text is complete (not pandas' shortened plain-text form of a table)."""
    found = []
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text" in output:
                found += [([line], True) for line in "".join(output["text"]).splitlines()]
            elif "text/html" in data:
                for tr in re.findall(r"<tr.*?</tr>", "".join(data["text/html"]), re.S):
                    found.append(([html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                                   for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)], True))
            elif "text/plain" in data:
                found += [([line], False) for line in "".join(data["text/plain"]).splitlines()]
    return found


ANY = "|".join(map(re.escape, NAMES))
LISTED = re.compile(rf"^(?P<say>[^:]*):\s*(?P<names>(?:{ANY})(?:,\s*(?:{ANY}))*)\s*$")
LEADING = re.compile(rf"^\s*(?:\d+\s+)?({ANY})\b\W")


def stale(nb: dict) -> list[str]:
    problems = []
    verdicts = {s["verdict"] for s in SUMMARIES.values()}
    numbers = {s.get("number") for s in SUMMARIES.values()}
    for cells, complete in rows(nb):
        if len(cells) > 1:  # a table row: a cell that is a recipe's name, and a cell that is a verdict
            names = [c for c in cells if c in SUMMARIES]
            beyond = [c for c in cells if c.startswith("beyond the claim: ")]
            if len(names) == 1 and beyond:  # an extension's findings row
                now = EXTENSIONS.get((names[0], beyond[0]))
                if now is None or [now.ours, now.verdict, now.finding] != cells[-3:]:
                    problems.append(f"{names[0]}: an extension row shows {cells[-3:]!r}, now it is "
                                    f"{None if now is None else [now.ours, now.verdict, now.finding]!r}")
                continue
            shown = [c for c in cells if PHRASE.match(c)]
            if len(names) == 1 and shown and SUMMARIES[names[0]]["verdict"] not in shown:
                found = FINDINGS.loc[names[0]]
                if found["paper"] and found["paper"] in cells or found["ours"] in cells:  # a findings row
                    if [found["ours"], found["verdict"], found["finding"]] != cells[-3:]:
                        problems.append(f"{names[0]}: a findings row shows {cells[-3:]!r}, now it is "
                                        f"{[found['ours'], found['verdict'], found['finding']]!r}")
                else:
                    problems.append(f"{names[0]}: a row shows {shown[0]!r}, its verdict now is "
                                    f"{SUMMARIES[names[0]]['verdict']!r}")
            continue
        line = cells[0].strip() if cells else ""
        if line.startswith("verdict:") and line.split(":", 1)[1].strip() not in verdicts:
            problems.append(f"no recipe's current verdict: {line!r}")
        if line.startswith("number:") and line.split(":", 1)[1].strip() not in numbers:
            problems.append(f"no recipe's current number: {line!r}")
        listed = LISTED.match(line)
        if listed and PHRASE.search(listed.group("say")):  # "not tested (a gate failed): a, b, c"
            phrase = PHRASE.search(listed.group("say")).group(0)
            said = set(RECIPE.findall(listed.group("names")))
            now = {n for n, s in SUMMARIES.items() if s["verdict"].startswith(phrase)}
            if said != now:
                problems.append(f"lists {sorted(said)} as {phrase!r}; now {sorted(now)} are")
        leading = LEADING.match(line)  # a line (or a plain-text table row) about one recipe, with a verdict
        if leading and line[leading.end():].startswith("[beyond the claim: "):
            continue  # an extension's printed finding: checked with the findings below
        if leading and PHRASE.search(line[leading.end():]):
            current = SUMMARIES[leading.group(1)]["verdict"]
            start = PHRASE.match(current)
            expected = current if complete else (start.group(0) if start else current[:12])
            if expected not in line and line != f"{leading.group(1)}: {short_verdict(current)}":
                problems.append(f"{leading.group(1)}: shows {line!r}, its verdict now is {current!r}")
    return problems + printed_findings(nb)


def printed_findings(nb: dict) -> list[str]:
    """A printed finding (``recipe: verdict``, then its sentence wrapped and indented) must be the current one."""
    problems = []
    for cell in nb["cells"]:
        if not re.search(r"findings_(table|text)", "".join(cell.get("source", ""))):
            continue
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", ""))
            for name, verdict, sentence in re.findall(rf"^({ANY}): (.*)\n((?:  .*\n?)+)", text, re.M):
                now = FINDINGS.loc[name]
                said = " ".join(line.strip() for line in sentence.splitlines())
                if (verdict, said) != (now["verdict"], now["finding"]):
                    problems.append(f"{name}: prints the finding {verdict!r} / {said[:120]!r}..., now it is "
                                    f"{now['verdict']!r} / {now['finding'][:120]!r}...")
            for name, beyond, verdict, sentence in EXTENDED.findall(text):
                now = EXTENSIONS.get((name, beyond))
                said = " ".join(line.strip() for line in sentence.splitlines())
                if now is None or (verdict, said) != (now.verdict, now.finding):
                    problems.append(f"{name} [{beyond}]: prints {verdict!r} / {said[:120]!r}..., now it is "
                                    f"{None if now is None else (now.verdict, now.finding[:120])!r}")
    return problems


def test_there_are_summaries_to_compare_with():
    assert SUMMARIES, "no checkpoints/*/summary.json"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_outputs_agree_with_the_recipes_summaries(path):
    problems = stale(json.loads(path.read_text()))
    assert not problems, f"{path.name} is stale (re-execute it):\n" + "\n".join(problems)


def test_results_notebook_shows_every_recipe():
    nb = json.loads((ROOT / "notebooks" / "08_results_at_matched_compute.ipynb").read_text())
    shown = "\n".join(" | ".join(cells) for cells, _ in rows(nb))
    missing = [name for name, s in SUMMARIES.items() if s["verdict"] not in shown or name not in shown]
    assert not missing, f"08 does not show these recipes' current verdicts: {missing}"


def test_a_stale_verdict_is_caught():
    """The test can fail: an output naming a recipe with another verdict, or listing it wrongly, is stale."""
    name, summary = next((n, s) for n, s in SUMMARIES.items() if not s["verdict"].startswith("not tested"))
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "stream", "text": [f"verdict: not tested: {name} learned = 0.01 (needs >= 0.1)\n",
                                           f"not tested (a gate failed): {name}\n"]},
        {"output_type": "execute_result", "data": {"text/html": [
            f"<table><tr><td>{name}</td><td>paper</td><td>not tested: an old gate</td></tr></table>"]}}]}]}
    problems = stale(nb)
    assert len(problems) == 3, problems


def test_a_stale_extension_is_caught():
    """An extension row or printed extension that no longer matches its recipe's is stale, like a verdict."""
    if not EXTENSIONS:
        pytest.skip("no shipped recipe reports an extension")
    (name, beyond), now = next(iter(EXTENSIONS.items()))
    nb = {"cells": [{"cell_type": "code", "source": "print(findings_text(...))", "outputs": [
        {"output_type": "stream", "text": [f"{name} [{beyond}]: an old verdict\n", "  an old sentence.\n"]},
        {"output_type": "execute_result", "data": {"text/html": [
            f"<table><tr><td>{name}</td><td>{beyond}</td><td>{now.ours}</td><td>an old verdict</td>"
            f"<td>{now.finding}</td></tr></table>"]}}]}]}
    assert len(stale(nb)) == 2, stale(nb)
    current = {"cells": [{"cell_type": "code", "source": "print(findings_text(...))", "outputs": [
        {"output_type": "stream", "text": [f"{name} [{beyond}]: {now.verdict}\n", f"  {now.finding}\n"]}]}]}
    assert stale(current) == []
