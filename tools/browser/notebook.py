"""One notebook, checked the way a user meets it: open it, Run All, use its widgets, take pictures.

``check_notebook`` opens one notebook in a fresh browser context, waits for its kernel, runs
Run > Run All Cells from the menu, waits until the kernel is idle and no cell shows ``[*]``, and
checks: no cell has an error output (cells tagged ``raises-exception`` may) and none printed a
traceback; every cell ran; every widget output rendered as ipywidgets DOM; and for every widget
with a slider or a menu, focusing that control and pressing an arrow key moves it *and* changes
what the widget shows apart from its controls (a label, an HTML summary, an image) - the round
trip through the kernel, not just the slider's own readout. It saves a screenshot of the whole
notebook after the interaction and one of each widget it moved, and returns a ``NotebookReport``
whose ``problems`` are what failed, in words.

What the page is asked runs in the page: the scripts in ``js/``, read once at import (one-line
expressions stay inline beside the Playwright calls they belong to).
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

from .jupyterlab import JupyterLab
from .processes import BudgetSpent, Deadline
from .report import NotebookReport, WidgetCheck
from .settings import CHANGE_SECONDS, MAX_SCREENSHOT_HEIGHT, VIEWPORT

JS = Path(__file__).resolve().with_name("js")


def _script(name: str) -> str:
    return (JS / f"{name}.js").read_text()


PANEL = _script("panel")  # defines panel(path), the notebook panel open on a path
STATE = PANEL + _script("state")
CELLS = PANEL + _script("cells")
DISPLAY = _script("display")
CONTROL = _script("control")


def _short(display: dict[str, Any]) -> str:
    text = display["text"]
    text = text if len(text) <= 90 else text[:87] + "..."
    return f"{text} [{len(display['images'])} image(s)]" if display["images"] else text


def _excerpts(before: dict[str, Any], after: dict[str, Any], width: int = 80) -> tuple[str, str]:
    """The two displays' texts around where they first differ, and whether an image changed."""
    a, b = before["text"], after["text"]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, first - 20) if a != b else 0

    def cut(text: str) -> str:
        return ("..." if start else "") + text[start:start + width] + ("..." if len(text) > start + width else "")

    images = ("" if not (before["images"] or after["images"]) else
              " [image unchanged]" if before["images"] == after["images"] else " [image changed]")
    return cut(a), cut(b) + images


def check_notebook(browser: Any, lab: JupyterLab, path: str, screens: Path, deadline: Deadline,
                   change_seconds: float = CHANGE_SECONDS, figures: bool = False) -> NotebookReport:
    """Open ``path`` (relative to the server's root) in a new page, run it, use its widgets; see the module doc.

    ``change_seconds``: how long a widget may take to redraw after its control moves. ``figures``: also save
    each static figure as drawn in its cell (``NAME-figNN.png``, NN its cell), to look at it at its own size.
    """
    from playwright.sync_api import Error as PlaywrightError

    report = NotebookReport(notebook=path)
    stem = Path(path).stem
    screens.mkdir(parents=True, exist_ok=True)
    for old in screens.glob(f"{stem}*.png"):
        old.unlink()
    start = time.monotonic()
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.on("console", lambda m: report.console_errors.append(m.text[:300]) if m.type == "error" else None)
    page.on("pageerror", lambda e: report.console_errors.append(f"page error: {str(e)[:300]}"))
    try:
        _run(page, lab, path, screens, stem, deadline, report, change_seconds, figures)
    except (PlaywrightError, BudgetSpent) as exc:
        report.timed_out = deadline.left() <= 1 or isinstance(exc, BudgetSpent)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        report.problems.append(f"gave up after {time.monotonic() - start:.0f} s of {deadline.seconds:.0f}: {first}")
    finally:
        with contextlib.suppress(PlaywrightError):
            if not (screens / f"{stem}.png").exists():  # a failure leaves a picture of where it stopped
                _full_screenshot(page, screens / f"{stem}.png", report)
        closing = time.monotonic()
        with contextlib.suppress(PlaywrightError):
            context.close()
        lab.shutdown_kernels()
        report.phases["close"] = time.monotonic() - closing
        report.seconds = time.monotonic() - start
    return report


def _poll(page: Any, deadline: Deadline, what: str, seconds: float, probe: Any) -> Any:
    """Call ``probe()`` every half second until it returns something truthy; raise after ``seconds``."""
    end = time.monotonic() + min(seconds, max(deadline.left(), 0))
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= end:
            raise BudgetSpent(f"{what}: not within {seconds:.0f} s")
        page.wait_for_timeout(500)


def _run(page: Any, lab: JupyterLab, path: str, screens: Path, stem: str, deadline: Deadline,
         report: NotebookReport, change_seconds: float, figures: bool = False) -> None:
    phase = time.monotonic()

    def lap(name: str) -> None:
        nonlocal phase
        report.phases[name] = time.monotonic() - phase
        phase = time.monotonic()

    page.goto(lab.url(path), wait_until="domcontentloaded", timeout=deadline.ms(90))
    state = lambda: page.evaluate(STATE, path)  # noqa: E731

    def kernel_ready() -> bool:
        s = state()
        if s.get("dialog"):  # e.g. "Select Kernel" for a notebook without kernel metadata: take the default
            with contextlib.suppress(Exception):
                page.locator(".jp-Dialog .jp-mod-accept").first.click(timeout=5000)
        return s.get("ready") and s.get("kernel") and s.get("status") == "idle"

    _poll(page, deadline, "the notebook to open and its kernel to start", 120, kernel_ready)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # the notebook, not the file browser
    notebook = page.locator(f'[id="{page.evaluate(PANEL + "(path) => panel(path).id", path)}"]')

    # Run > Run All Cells, as a user does
    run_start = time.monotonic()
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click(timeout=deadline.ms(30))
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click(timeout=deadline.ms(30))
    _wait_idle(page, deadline, state, deadline.left(), "Run All Cells")
    report.run_seconds = time.monotonic() - run_start
    lap("open")
    report.phases["open"] -= report.run_seconds
    report.phases["run"] = report.run_seconds

    def settled() -> list[dict[str, Any]] | None:  # widget views render asynchronously; a closed one stays empty
        cells = page.evaluate(CELLS, path)
        pending = [o for c in cells for o in c["outputs"]
                   if o["widget"] and not o["rendered"] and (not o["shown"] or "Loading" in o["shown"])]
        return None if pending else cells

    try:
        cells = _poll(page, deadline, "the widgets to render", 10, settled)
    except BudgetSpent:
        cells = page.evaluate(CELLS, path)
    code = [c for c in cells if c["type"] == "code" and not c["empty"]]
    report.code_cells = len(code)
    report.executed = sum(c["count"] is not None for c in code)
    first_error = None
    for c in cells:
        for o in c["outputs"]:
            where = f"cell {c['index'] + 1} ({c['head']!r})"
            if o["type"] == "error" and "raises-exception" not in c["tags"]:
                report.problems.append(f"{where} raised {o['ename']}: {o['evalue'][:300]}")
                first_error = c["index"] if first_error is None else first_error
            elif o["type"] == "stream" and "Traceback (most recent call last)" in o["text"]:
                report.problems.append(f"{where} printed a traceback: ...{o['text'][-300:]}")
    not_run = [c["index"] + 1 for c in code if c["count"] is None]
    if not_run:
        after = " after the error" if first_error is not None and min(not_run) > first_error + 1 else ""
        report.problems.append(f"cells {not_run} did not run{after}")

    report.problems += figure_problems(cells)

    # every widget output rendered; the ones with a control respond to the keyboard
    for c in cells:
        for k, o in enumerate(c["outputs"]):
            if not o["widget"]:
                continue
            check = WidgetCheck(cell=c["index"] + 1, output=k + 1, kinds=o["kinds"])
            if not o["rendered"]:
                if o["shown"]:  # "Error displaying widget", a plain-text repr: no widget manager
                    report.problems.append(f"cell {check.cell}: a widget did not render, it shows {o['shown']!r}")
                continue  # an empty output: the widget was closed (e.g. a finished progress bar)
            report.widgets.append(check)
            output = (notebook.locator(".jp-Notebook .jp-Cell").nth(c["index"])
                      .locator(".jp-OutputArea-child").nth(k).locator(".jp-OutputArea-output"))
            shot = screens / f"{stem}-cell{check.cell:02d}{'' if k == 0 else f'-{k + 1}'}.png"
            _interact(page, output, check, deadline, state, report, shot, change_seconds)

    lap("widgets")
    if figures:  # each static figure as the reader sees it in its cell
        for c in cells:
            for k, o in enumerate(c["outputs"]):
                if o["widget"] or not o.get("images"):
                    continue
                output = (notebook.locator(".jp-Notebook .jp-Cell").nth(c["index"])
                          .locator(".jp-OutputArea-child").nth(k).locator(".jp-OutputArea-output"))
                shot = screens / f"{stem}-fig{c['index'] + 1:02d}{'' if k == 0 else f'-{k + 1}'}.png"
                _output_screenshot(page, output, shot, deadline)
                report.screenshots.append(str(shot))
        lap("figures")
    _full_screenshot(page, screens / f"{stem}.png", report, notebook)
    lap("screenshot")


STRETCH = 1.03  # drawn width (or proportions) beyond this factor of the image's own: a stretched figure


def figure_problems(cells: list[dict[str, Any]]) -> list[str]:
    """Figures that do not read as drawn: an image shown larger than its pixels or out of its proportions
    (a PNG stretched to the cell's width), and a static figure beside a live widget in one cell (a frozen
    twin showing another setting than the widget above it)."""
    problems = []
    for c in cells:
        where = f"cell {c['index'] + 1} ({c['head']!r})"
        for o in c["outputs"]:
            for img in o.get("images", []):
                (nw, nh), (dw, dh) = img["natural"], img["drawn"]
                if dw and dh and (dw > nw * STRETCH or abs((dw / dh) / (nw / nh) - 1) > STRETCH - 1):
                    problems.append(f"{where}: a {nw}x{nh} px image is drawn stretched to {dw}x{dh} px")
        live = [o for o in c["outputs"] if o["widget"] and o["rendered"]]
        frozen = [o for o in c["outputs"]
                  if not o["widget"] and any(m.startswith("image/") for m in o.get("mimes", []))]
        if live and frozen:
            problems.append(f"{where}: a static figure is shown beside a live widget (a frozen twin)")
    return problems


def _wait_idle(page: Any, deadline: Deadline, state: Any, seconds: float, what: str) -> None:
    """Until the kernel is idle and no cell shows [*], twice in a row a second apart."""
    calm = 0
    end = time.monotonic() + min(seconds, max(deadline.left(), 0))
    last: dict[str, Any] = {}
    while calm < 2:
        if time.monotonic() >= end:
            running = [i + 1 for i in last.get("running", [])]
            raise BudgetSpent(f"{what}: not finished after {seconds:.0f} s (kernel {last.get('status')}, "
                              f"cells {running} show [*])")
        page.wait_for_timeout(1000)
        last = state()
        if last.get("status") in ("dead", "unknown") or "restarting" in str(last.get("status")):
            raise BudgetSpent(f"{what}: the kernel is {last.get('status')} (did it run out of memory?)")
        calm = calm + 1 if last.get("status") == "idle" and not last.get("running") else 0


def _interact(page: Any, output: Any, check: WidgetCheck, deadline: Deadline, state: Any,
              report: NotebookReport, shot: Path, change_seconds: float) -> None:
    output.scroll_into_view_if_needed(timeout=deadline.ms(30))
    control = output.evaluate(CONTROL)
    if control is None:
        return
    before = output.evaluate(DISPLAY)
    check.before = _short(before)  # until the control has moved
    if control["kind"] == "slider":  # the focused handle takes the arrow keys
        keys = ["ArrowLeft" if float(control["now"]) >= float(control["max"]) else "ArrowRight"]
        target = output.locator(".widget-slider .noUi-handle").nth(control["index"])
        attribute = "aria-valuenow"
    else:  # a plain arrow on a menu moves JupyterLab's cell selection: open the menu, step, choose
        keys = ["Alt+ArrowDown", "ArrowUp" if control["last"] else "ArrowDown", "Enter"]
        target = output.locator(".widget-dropdown select").nth(control["index"])
        attribute = None
    key = ", ".join(keys)
    target.focus(timeout=deadline.ms(30))
    pressed = time.monotonic()
    for k in keys:
        page.keyboard.press(k)

    def moved() -> str | None:
        now = (target.get_attribute(attribute) if attribute else
               str(target.evaluate("(s) => s.selectedIndex")))
        return now if now != control["now"] else None

    try:
        now = _poll(page, deadline, "the control to move", 5, moved)
    except BudgetSpent:
        check.control = f"{control['kind']} {control['label']!r} at {control['text']} ({key})"
        check.changed = False
        report.problems.append(f"cell {check.cell}: {key} on the {control['kind']} {control['label']!r} "
                               "did not move it")
        return
    if attribute:
        shown_now = target.get_attribute("aria-valuetext") or now
        check.control = f"slider {control['label']!r} {control['text']} -> {shown_now} ({key})"
    else:
        value = target.evaluate("(s) => s.value")
        check.control = f"menu {control['label']!r} {control['text']!r} -> {value!r} ({key})"

    def redrawn() -> dict[str, Any] | None:
        display = output.evaluate(DISPLAY)
        return display if display != before else None

    try:
        _poll(page, deadline, "the widget to redraw", change_seconds, redrawn)
        check.seconds = time.monotonic() - pressed
        check.changed = True
    except BudgetSpent:
        check.changed = False
        report.problems.append(f"cell {check.cell}: moving the {check.control} did not change what the widget "
                               f"shows within {change_seconds:.0f} s (still {_short(output.evaluate(DISPLAY))!r})")
    _wait_idle(page, deadline, state, max(change_seconds, 30), f"cell {check.cell}'s redraw")
    # the redraw may arrive in parts (summary, then image): describe the settled state
    check.before, check.after = _excerpts(before, output.evaluate(DISPLAY))
    _output_screenshot(page, output, shot, deadline)
    check.screenshot = str(shot)
    report.screenshots.append(str(shot))


def _output_screenshot(page: Any, output: Any, path: Path, deadline: Any) -> None:
    """One cell's output in one picture: the window made taller than the output first, since JupyterLab's panel
    clips what lies below the window (an element screenshot would show its lower part blank)."""
    box = output.bounding_box(timeout=deadline.ms(10)) or {"height": 0}
    page.set_viewport_size({"width": VIEWPORT["width"],
                            "height": int(min(max(VIEWPORT["height"], box["height"] + 200), MAX_SCREENSHOT_HEIGHT))})
    try:
        output.scroll_into_view_if_needed(timeout=deadline.ms(10))
        page.wait_for_timeout(300)
        output.screenshot(path=str(path), timeout=deadline.ms(30))
    finally:
        page.set_viewport_size(VIEWPORT)


def _full_screenshot(page: Any, path: Path, report: NotebookReport, notebook: Any = None) -> None:
    """The whole notebook in one picture: the window made as tall as the notebook's content."""
    if notebook is None:
        notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
    height = 0
    with contextlib.suppress(Exception):
        height = notebook.locator(".jp-WindowedPanel-outer").first.evaluate(
            "(s) => { s.scrollTop = 0; return s.scrollHeight - s.clientHeight; }", timeout=5000)
    page.set_viewport_size({"width": VIEWPORT["width"],
                            "height": int(min(VIEWPORT["height"] + max(height, 0), MAX_SCREENSHOT_HEIGHT))})
    page.wait_for_timeout(500)
    page.screenshot(path=str(path), timeout=30_000)
    page.set_viewport_size(VIEWPORT)
    report.screenshots.insert(0, str(path))
