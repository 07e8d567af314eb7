"""docs/CLI.md shows a session the command line still runs: its commands are ``tools/cli_session.SESSION``'s, and
running them again prints what the page shows, numbers and generated text aside (those move with the machine)."""

from __future__ import annotations

import re

import pytest

from tools import cli_session
from workbench import cli

pytestmark = pytest.mark.slow

PAGE = cli_session.PAGE.read_text(encoding="utf-8")


def page_blocks(kind: str) -> list[str]:
    return [block.strip("\n") for block in re.findall(rf"```{kind}\n(.*?)```", PAGE, flags=re.S)]


def test_the_page_shows_the_session_s_commands_in_order():
    assert page_blocks("bash")[1:] == [command for _, command in cli_session.SESSION]  # [0]: the corpus


def test_the_session_prints_what_the_page_shows_numbers_aside(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    corpus = cli_session.write_corpus(tmp_path)
    assert corpus.stat().st_size > 100_000  # enough text for 150 steps of 16 windows without repeating much
    shown = page_blocks("text")
    assert len(shown) == len(cli_session.SESSION)
    for (_, command), page_output in zip(cli_session.SESSION, shown):
        capsys.readouterr()
        assert cli.main(cli_session.workbench_argv(command)) == 0
        assert cli_session.skeleton(capsys.readouterr().out) == cli_session.skeleton(page_output), command


def test_the_skeleton_keeps_words_and_drops_numbers_and_generated_text():
    out = "loss 1.9567, bpb +2.8 [-0.1, +0.3]\n  150   steps 1.2e+11 FLOPs, 2.12x\n--- soft (plain)\nabc 12\n\nxyz\n"
    assert cli_session.skeleton(out) == ["loss #, bpb # [#, #]", "# steps # FLOPs, #", "--- soft (plain)", "<text>"]
    with pytest.raises(ValueError, match="command"):
        cli_session.workbench_argv("python train.py")
