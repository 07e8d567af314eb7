"""Screenshots of the notebooks as a user sees them in JupyterLab, after using their widgets (`make screens`).

The same flow as the browser tests (tools/browser, which both use): JupyterLab from this interpreter on a
loopback port with a random token, serving a temporary copy of the notebooks; Debian's Chromium,
headless, driven by Playwright; Run > Run All Cells; each widget's slider or menu moved with the
keyboard. Writes ``reports/screens/NAME.png`` (the whole notebook), ``NAME-cellNN.png`` (each widget
after it was moved), ``index.md`` (what was checked, with the pictures) and ``jupyterlab.log``.

    python tools/screens.py                      # every notebooks/*.ipynb
    python tools/screens.py notebooks/00_tour.ipynb --notebook-seconds 300
    python tools/screens.py notebooks/04_fbt_latent_feedback.ipynb --figures   # also NAME-figNN.png per figure

Exit status: 0 when every notebook passed the checks, 1 when one did not, 2 when the browser or
Playwright is missing (it says how to install them; never ``playwright install``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import browser as driver  # tools/browser, beside this script (the browser tests import it as tools.browser)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--out", type=Path, default=driver.SCREENS, help="default: reports/screens")
    parser.add_argument("--notebook-seconds", type=float, default=driver.NOTEBOOK_SECONDS,
                        help="time allowed per notebook (default %(default)s)")
    parser.add_argument("--figures", action="store_true",
                        help="also save each static figure as drawn in its cell (NAME-figNN.png, NN its cell)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted(driver.NOTEBOOKS.glob("*.ipynb"))
    if not notebooks:
        print("no notebooks to show (notebooks/*.ipynb is empty)")
        return 0
    missing = [str(nb) for nb in notebooks if not nb.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    reason = driver.missing_reason()
    if reason:
        print(f"cannot take the screenshots: {reason}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    start = time.monotonic()
    reports = []
    with tempfile.TemporaryDirectory(prefix="workbench-screens-") as tmp:
        paths = driver.stage(notebooks, Path(tmp))
        with driver.terminate_as_interrupt(), driver.JupyterLab(Path(tmp), log=out / "jupyterlab.log") as lab, \
                driver.Chromium() as chromium:
            print(f"JupyterLab and Chromium up in {time.monotonic() - start:.0f} s", flush=True)
            for path in paths:
                report = driver.check_notebook(chromium.browser, lab, path, out, driver.Deadline(args.notebook_seconds),
                                               figures=args.figures)
                reports.append(report)
                print(report.summary(), flush=True)
    index = driver.write_index(reports, out, "`make screens` (tools/screens.py)")
    failed = [r.notebook for r in reports if not r.ok]
    print(f"\n{len(reports) - len(failed)}/{len(reports)} notebooks passed in {time.monotonic() - start:.0f} s; "
          f"screenshots and {index.name} in {out}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
