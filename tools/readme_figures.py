"""Draw the README's opening diagrams from ``workbench.diagrams``: ``python tools/readme_figures.py``.

Writes ``notebooks/screens/recurrence_lrt.png`` and ``notebooks/screens/recurrence_fbt.png`` (token t reads
m_{t-1}, as each method does it), so the picture a newcomer sees first is the code's own drawing, not a hand-made one.
"""

from __future__ import annotations

from pathlib import Path

from workbench import diagrams

DOCS = Path(__file__).resolve().parents[1] / "notebooks" / "screens"
FIGURES = {"recurrence_lrt.png": dict(mechanism="lrt"), "recurrence_fbt.png": dict(mechanism="fbt")}
DPI = 80


def main(out: Path = DOCS) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, kwargs in FIGURES.items():
        path = out / name
        diagrams.recurrence(positions=4, layers=3, **kwargs).savefig(path, dpi=DPI)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in main():
        print(path)
