"""What a notebook's check found, in words and pictures: ``NotebookReport`` per notebook, ``index.md`` for all."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from .settings import REPO


def _relative(path: str) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(REPO))
    return path


@dataclass
class WidgetCheck:
    cell: int  # 1-based, counting every cell of the notebook from the top
    output: int  # 1-based among that cell's outputs
    kinds: list[str]  # the ipywidgets classes it rendered: slider, dropdown, html, image, ...
    control: str = ""  # what was moved, e.g. "slider 'pass' 8 -> 7 (ArrowLeft)"; "" when it has none
    before: str = ""
    after: str = ""
    changed: bool | None = None  # None: no control to move
    seconds: float = 0.0  # from the key press to the changed display
    screenshot: str = ""


@dataclass
class NotebookReport:
    notebook: str
    seconds: float = 0.0  # open, run, interact, screenshot
    run_seconds: float = 0.0  # Run All Cells until idle
    code_cells: int = 0
    executed: int = 0
    problems: list[str] = field(default_factory=list)
    widgets: list[WidgetCheck] = field(default_factory=list)
    screenshots: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # seconds: open, run, widgets, screenshot, close
    timed_out: bool = False  # its deadline ran out before the checks were done

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def failed_before_timeout(self) -> bool:
        """A problem found before the deadline ran out (the time-out itself is the last problem)."""
        return len(self.problems) > (1 if self.timed_out else 0)

    def summary(self) -> str:
        moved = [w for w in self.widgets if w.changed is not None]
        lines = [f"{self.notebook}: {'ok' if self.ok else 'FAILED'} in {self.seconds:.0f} s "
                 f"(Run All {self.run_seconds:.0f} s; {self.executed}/{self.code_cells} code cells ran; "
                 f"{len(self.widgets)} widgets rendered, {sum(bool(w.changed) for w in moved)}/{len(moved)} "
                 "responded to the keyboard)"]
        if self.phases:
            lines.append("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items()))
        lines += [f"  problem: {p}" for p in self.problems]
        for w in self.widgets:
            what = ("no keyboard control" if w.changed is None else
                    f"{w.control}: {'changed' if w.changed else 'NO CHANGE'}"
                    + (f" in {w.seconds:.1f} s" if w.changed else "")
                    + f" ({w.before!r} -> {w.after!r})")
            lines.append(f"  cell {w.cell} widget [{', '.join(w.kinds)}]: {what}")
        lines += [f"  screenshot: {_relative(s)}" for s in self.screenshots]
        lines += [f"  browser console: {c}" for c in self.console_errors[:5]]
        return "\n".join(lines)


def write_index(reports: list[NotebookReport], out: Path, by: str, name: str = "index.md") -> Path:
    """``out/name``: each notebook's result, its screenshot and what each widget did."""
    lines = ["# The notebooks in JupyterLab", "",
             f"Written by {by} on {time.strftime('%Y-%m-%d %H:%M')}: each notebook opened in JupyterLab in "
             "headless Chromium, run with Run > Run All Cells, then each widget's slider or menu moved with "
             "the keyboard. The pictures are taken after that.", "",
             "| notebook | result | seconds | widgets that responded |", "|---|---|---|---|"]
    for r in reports:
        moved = [w for w in r.widgets if w.changed is not None]
        lines.append(f"| [{r.notebook}](#{Path(r.notebook).stem}) | {'ok' if r.ok else 'FAILED'} | "
                     f"{r.seconds:.0f} | {sum(bool(w.changed) for w in moved)}/{len(moved)} |")
    for r in reports:
        lines += ["", f"## {Path(r.notebook).stem}", "", "```", r.summary(), "```", ""]
        lines += [f"![{Path(s).name}]({Path(s).name})" for s in r.screenshots if Path(s).parent == out]
    path = out / name
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
