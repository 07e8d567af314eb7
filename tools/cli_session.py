"""A newcomer's session at the command line, run for real: two small byte-level models (a baseline and an FBT)
trained on a text file, then evaluated, compared and decoded, each step one ``python -m workbench`` command.
Every command and what it printed goes to docs/CLI.md, so the page shows real output, never typed numbers.

    python tools/cli_session.py             # run the session in a scratch folder, write docs/CLI.md
    python tools/cli_session.py --keep DIR  # run it in DIR (its corpus and runs stay there)

``tests/e2e/test_cli_session.py`` runs the same commands and checks that their output has the page's shape
(numbers and generated text aside), so the page cannot drift from the command line.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the repository's package, not an installed one
    sys.path.insert(0, str(ROOT))

from workbench.files import write_bytes_atomic  # noqa: E402

PAGE = ROOT / "docs" / "CLI.md"
# any UTF-8 file will do; this one is four modules of Python's standard library, so every machine has it
CORPUS_MODULES = ("textwrap", "string", "shlex", "difflib")
MODEL = "--task text --task-param path=corpus.txt --task-param seq_len=64 --n-layer 2 --n-head 2 --n-embd 64"
TRAIN = f"python -m workbench train {MODEL} --steps 150 --batch-size 16 --no-progress"
# (what the step is for, the command)
SESSION: tuple[tuple[str, str], ...] = (
    ("Train a baseline (no feedback) on the file: 150 steps, saved with its history under `runs/base`.",
     f"{TRAIN} --out runs/base"),
    ("The same model with FBT's feedback, trained two passes a batch (the paper's Jacobi training). Its end line "
     "gives the held-out loss under that schedule *and* under the exact recurrence a decoder runs.",
     f"{TRAIN} --mechanism fbt --schedule multipass --passes 2 --out runs/fbt"),
    ("Reload it and evaluate: the training schedule beside the exact recurrence, on the file's held-out tail.",
     "python -m workbench eval runs/fbt"),
    ("Compare the two, paired over the same held-out windows (the first run is the reference). By default "
     "every run is read under the exact recurrence ...",
     "python -m workbench compare runs/base runs/fbt"),
    ("... and `--schedule training` reads each under its own training schedule: the gap between the two "
     "comparisons is the feedback the exact recurrence does not realise.",
     "python -m workbench compare runs/base runs/fbt --schedule training"),
    ("Decode a prompt under the three regimes of the FBT paper: STANDARD, SOFT and FUSED.",
     "python -m workbench generate runs/fbt --prompt 'def wrap(' --max-new-tokens 40"),
)
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?x?")


def write_corpus(folder: Path) -> Path:
    """``corpus.txt`` in ``folder``: ``CORPUS_MODULES``' sources, one after the other."""
    import importlib

    text = "".join(Path(importlib.import_module(m).__file__).read_text(encoding="utf-8") for m in CORPUS_MODULES)
    (folder / "corpus.txt").write_text(text, encoding="utf-8")
    return folder / "corpus.txt"


def workbench_argv(command: str) -> list[str]:
    """A session command's arguments after ``python -m workbench``."""
    words = shlex.split(command)
    if words[:3] != ["python", "-m", "workbench"]:
        raise ValueError(f"command={command!r} is invalid: a session command starts with 'python -m workbench'")
    return words[3:]


def run(folder: Path) -> list[tuple[str, str, str]]:
    """Every step of ``SESSION`` run in ``folder`` (the corpus written first) by this Python, one torch thread:
    (what it is for, the command, what it printed)."""
    write_corpus(folder)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = []
    for why, command in SESSION:
        done = subprocess.run([sys.executable, "-m", "workbench", *workbench_argv(command)], cwd=folder, env=env,
                              capture_output=True, text=True, check=True)
        out.append((why, command, done.stdout.rstrip()))
    return out


def skeleton(output: str) -> list[str]:
    """What of a command's output must not change when the machine does: each line with its numbers as ``#``
    and its spacing collapsed; a regime's generated text (the lines under a ``---`` heading) as one ``<text>``."""
    lines, generated = [], False
    for line in output.splitlines():
        if line.startswith("--- "):
            generated = True
            lines.append(" ".join(NUMBER.sub("#", line).split()))
        elif generated:
            if lines[-1] != "<text>":
                lines.append("<text>")
        elif line.strip():
            lines.append(" ".join(NUMBER.sub("#", line).split()))
    return lines


def page(steps: list[tuple[str, str, str]]) -> str:
    """docs/CLI.md from a session's steps."""
    head = [
        "# A session at the command line",
        "",
        "Two byte-level models trained on a text file, then evaluated, compared and decoded, each step one command. "
        f"Written by `python tools/cli_session.py` (Python {platform.python_version()}, one torch thread), which "
        "ran every command below and pasted what it printed; a test reruns them and checks the output keeps this "
        "shape. The models are tiny and train for seconds: the numbers show the interface, not a finding "
        "(for those see [RESULTS.md](../RESULTS.md)).",
        "",
        "The text file: any UTF-8 file works. This session concatenates four modules of Python's standard library:",
        "",
        "```bash",
        f"cat $(python -c \"import {', '.join(CORPUS_MODULES)}; "
        f"print(' '.join(m.__file__ for m in ({', '.join(CORPUS_MODULES)})))\") > corpus.txt",
        "```",
        "",
        "Its last 10 % is the held-out split every command below reads.",
    ]
    body = []
    for why, command, output in steps:
        body += ["", why, "", "```bash", command, "```", "", "```text", output, "```"]
    tail = ["", "Every command takes `--help`; [USAGE.md](USAGE.md) lists them all."]
    return "\n".join(head + body + tail) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, default=None, help="run in this folder and keep what it writes")
    args = parser.parse_args(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        steps = run(args.keep)
    else:
        with tempfile.TemporaryDirectory() as folder:
            steps = run(Path(folder))
    write_bytes_atomic(PAGE, page(steps).encode())
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
