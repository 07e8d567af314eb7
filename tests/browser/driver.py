"""Drive JupyterLab in headless Chromium the way a user does: open a notebook, Run All, use its widgets.

Shared by the browser tests (``test_notebooks_in_browser.py``, fixtures in ``conftest.py``) and by
``make screens`` (``tools/screens.py``), so the test and the screenshots a person looks at come
from one flow:

1. ``JupyterLab`` starts ``python -m jupyterlab`` (this interpreter: the project's ``.venv``) on a
   free loopback port with a random token, in its own process group, with its config, data,
   runtime, settings and workspace folders in a temporary directory (no user state leaks in, no
   news or update checks, no terminals), serving a *copy* of the notebooks so JupyterLab's autosave
   never touches the committed ones. ``stop()`` shuts the server and its kernels down and kills
   whatever of it is left.
2. ``Chromium`` starts Playwright's driver and Debian's ``/usr/bin/chromium`` (never ``playwright
   install``: that downloads a browser and fails on a closed network) with the flags a closed,
   GPU-less machine needs. ``stop()`` closes both and kills whatever of them is left.
3. ``check_notebook`` opens one notebook in a fresh browser context, waits for its kernel, runs
   Run > Run All Cells from the menu, waits until the kernel is idle and no cell shows ``[*]``, and
   checks: no cell has an error output (cells tagged ``raises-exception`` may) and none printed a
   traceback; every cell ran; every widget output rendered as ipywidgets DOM; and for every widget
   with a slider or a menu, focusing that control and pressing an arrow key moves it *and* changes
   what the widget shows apart from its controls (a label, an HTML summary, an image) — the round
   trip through the kernel, not just the slider's own readout. It saves a screenshot of the whole
   notebook after the interaction and one of each widget it moved, and returns a
   ``NotebookReport`` whose ``problems`` are what failed, in words.

Every wait is bounded by a ``Deadline``; nothing here waits without one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
SCREENS = REPO / "reports" / "screens"
CHROMIUM = Path(os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium"))
# What a headless Chromium needs on a closed, GPU-less machine (as root: no sandbox). Without the
# background-networking flags it keeps trying to reach Google's hosts, which this network refuses.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]
NOTEBOOK_SECONDS = float(os.environ.get("WORKBENCH_BROWSER_NOTEBOOK_SECONDS", "180"))  # one notebook, all in
BUDGET_SECONDS = float(os.environ.get("WORKBENCH_BROWSER_BUDGET_SECONDS", "600"))  # the whole browser session
CHANGE_SECONDS = 60.0  # how long a widget may take to redraw after its control moves
VIEWPORT = {"width": 1400, "height": 1000}
MAX_SCREENSHOT_HEIGHT = 12000  # px; a longer notebook is cut there in its full-page screenshot

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# Controls: removed from a widget before reading what it shows, so a slider's own readout moving
# does not count as the widget responding.
CONTROLS = (".widget-slider, .widget-dropdown, .widget-select, .widget-select-multiple, .widget-toggle-buttons, "
            ".widget-radio, .widget-checkbox, .widget-toggle-button, .widget-text, .widget-textarea, "
            ".widget-button, .widget-play, .widget-colorpicker, .widget-datepicker")


class BudgetSpent(Exception):
    """A ``Deadline`` ran out."""


class Deadline:
    """A point in time every wait is capped by."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def ms(self, cap: float | None = None) -> float:
        """Milliseconds left (at most ``cap`` seconds) for a Playwright timeout; raises when none are."""
        left = self.left()
        if left <= 0:
            raise BudgetSpent(f"the {self.seconds:.0f} s allowed ran out")
        return 1000 * (left if cap is None else min(left, cap))


def missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return (f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium); "
                "never 'playwright install'")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: pip install -e '.[dev]' (it drives Debian's Chromium)"
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return f"jupyterlab is not installed for {sys.executable}"
    return None


# ---------------------------------------------------------------------------------------------- processes
def _descendants(pid: int) -> list[Any]:
    """psutil handles on every process below ``pid`` (empty without psutil, or when it is gone)."""
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:
        return []


def _reap(processes: list[Any], grace: float = 5.0) -> list[str]:
    """Terminate, then kill, those of ``processes`` still alive; returns what had to be ended."""
    try:
        import psutil
    except ImportError:
        return []
    alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    ended = []
    for p in alive:
        with contextlib.suppress(psutil.Error):
            ended.append(f"{p.pid} {' '.join(p.cmdline()[:3])}")
            p.terminate()
    _, alive = psutil.wait_procs(alive, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    return ended


def _die_with_parent() -> Any:
    """A ``preexec_fn`` that has the child get SIGTERM should its parent die (Linux's PR_SET_PDEATHSIG), or None.

    The backstop for a test run killed outright (SIGKILL), when no teardown runs: the server then
    shuts its kernels down itself. ``prctl`` is looked up here, before the fork.
    """
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, int(signal.SIGTERM))


@contextlib.contextmanager
def terminate_as_interrupt():
    """While inside, SIGTERM raises KeyboardInterrupt, so teardowns still stop the server and the browser."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """A JupyterLab server on ``root``, on loopback, with a random token; ``stop()`` always cleans up."""

    def __init__(self, root: Path, log: Path | None = None, startup_seconds: float = 120.0) -> None:
        self.root = Path(root)
        self.startup_seconds = startup_seconds
        self.token = secrets.token_hex(24)
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.state = Path(tempfile.mkdtemp(prefix="workbench-jupyter-"))
        self.log = Path(log) if log else self.state / "jupyterlab.log"
        self._log_file: Any = None

    # -- lifecycle
    def start(self) -> JupyterLab:
        settings = self.state / "settings" / "@jupyterlab"
        _write_json(settings / "apputils-extension" / "notification.jupyterlab-settings",
                    {"fetchNews": "false", "checkForUpdates": False})
        # every cell in the DOM (the default defers cells out of view), so checks and screenshots see all
        _write_json(settings / "notebook-extension" / "tracker.jupyterlab-settings",
                    {"windowingMode": "none", "scrollPastEnd": False})
        env = dict(os.environ,
                   JUPYTER_CONFIG_DIR=str(self.state / "config"), JUPYTER_DATA_DIR=str(self.state / "data"),
                   JUPYTER_RUNTIME_DIR=str(self.state / "runtime"), IPYTHONDIR=str(self.state / "ipython"),
                   JUPYTERLAB_SETTINGS_DIR=str(self.state / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(self.state / "workspaces"), PYTHONUNBUFFERED="1")
        env.pop("JUPYTER_TOKEN", None)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        deadline = Deadline(self.startup_seconds)
        for attempt in range(3):  # a free port can be taken between asking for it and binding it
            self.port = free_port()
            cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
                   "--port-retries=0", f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                   "--ServerApp.terminals_enabled=False", "--LabApp.expose_app_in_browser=True",
                   "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                   "--LabApp.extension_manager=readonly"]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                cmd.append("--allow-root")
            self._log_file = open(self.log, "w" if attempt == 0 else "a")  # noqa: SIM115 (closed in stop())
            self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdin=subprocess.DEVNULL,
                                         stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_die_with_parent())
            while deadline.left() > 0:
                if self.proc.poll() is not None:
                    break
                with contextlib.suppress(OSError, urllib.error.URLError):
                    if self._api("GET", "/api/status", timeout=3)[0] == 200:
                        return self
                time.sleep(0.5)
            if self.proc.poll() is None:  # still not answering: give up
                self.stop()
                raise RuntimeError(f"JupyterLab did not answer within {self.startup_seconds:.0f} s:\n{self.log_tail()}")
            self._log_file.close()
            if "already in use" not in self.log_tail() or attempt == 2:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log_tail()}")
        raise AssertionError("unreachable")

    def stop(self) -> list[str]:
        """Shut the server and its kernels down, kill what is left; returns what had to be killed."""
        killed: list[str] = []
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            family = _descendants(proc.pid)  # kernels run in sessions of their own: find them now
            with contextlib.suppress(OSError, urllib.error.URLError):
                self._api("POST", "/api/shutdown", timeout=5)  # stops the kernels, then the server
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                killed.append(f"jupyterlab {proc.pid}")
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, sig)
                    try:
                        proc.wait(timeout=5)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            killed += _reap(family)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        shutil.rmtree(self.state, ignore_errors=True)  # a log kept there goes with it; pass ``log`` to keep it
        return killed

    def __enter__(self) -> JupyterLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- use
    def url(self, path: str) -> str:
        """The notebook's address; ``reset`` opens it alone, not beside what the last page had open."""
        return f"http://127.0.0.1:{self.port}/lab/tree/{urllib.parse.quote(path)}?reset&token={self.token}"

    def _api(self, method: str, path: str, timeout: float = 10) -> tuple[int, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"},
                                         data=b"" if method in ("POST",) else None)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """End every session and kernel (between notebooks: one kernel at a time on a small machine)."""
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            for session in self._api("GET", "/api/sessions")[1] or []:
                self._api("DELETE", f"/api/sessions/{session['id']}", timeout=30)
            for kernel in self._api("GET", "/api/kernels")[1] or []:
                self._api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


class Chromium:
    """Playwright's driver and Debian's Chromium; ``stop()`` closes both and kills what is left."""

    def __init__(self) -> None:
        self.browser: Any = None
        self._playwright: Any = None
        self._family: list[Any] = []

    def start(self) -> Chromium:
        from playwright.sync_api import sync_playwright

        before = {p.pid for p in _descendants(os.getpid())}
        try:
            self._playwright = sync_playwright().start()
            self.browser = self._playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                            args=CHROMIUM_FLAGS, timeout=90_000)
        finally:  # the driver (node) and Chromium's processes: ours to end
            self._family = [p for p in _descendants(os.getpid()) if p.pid not in before]
        return self

    def stop(self) -> list[str]:
        for close in (getattr(self.browser, "close", None), getattr(self._playwright, "stop", None)):
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
        self.browser = self._playwright = None
        family, self._family = self._family, []
        return _reap(family)

    def __enter__(self) -> Chromium:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def stage(notebooks: list[Path], root: Path) -> list[str]:
    """Copy the notebooks' folders under ``root`` (keeping their names and siblings); returns their paths there.

    The repository's ``checkpoints/`` is linked beside a copied ``notebooks/``, so a notebook that
    reads ``../checkpoints`` finds it as in the repository.
    """
    paths = []
    for folder in sorted({nb.resolve().parent for nb in notebooks}):
        target = root / folder.name
        if not target.exists():
            shutil.copytree(folder, target, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
            sibling = folder.parent / "checkpoints"
            if sibling.is_dir() and not (root / "checkpoints").exists():
                (root / "checkpoints").symlink_to(sibling, target_is_directory=True)
    for nb in notebooks:
        paths.append(f"{nb.resolve().parent.name}/{nb.name}")
    return paths


# ---------------------------------------------------------------------------------------------- reports
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


def write_index(reports: list[NotebookReport], out: Path, by: str) -> Path:
    """``out/index.md``: each notebook's result, its screenshot and what each widget did."""
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
    path = out / "index.md"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------------------------- the page
# Finds the notebook panel open on PATH through the app JupyterLab exposes (expose_app_in_browser).
_PANEL = """
const panel = (path) => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return null;
  for (const w of app.shell.widgets('main')) if (w.context && w.context.path === path && w.content) return w;
  return null;
};
"""

_STATE = _PANEL + """
(path) => {
  const p = panel(path);
  if (!p || !p.context.isReady) return {ready: false};
  const sc = p.sessionContext;
  const cells = p.content.widgets.map((cell) => {
    const prompt = cell.node.querySelector('.jp-InputPrompt');
    return {type: cell.model.type, empty: !cell.model.sharedModel.getSource().trim(),
            prompt: prompt ? prompt.textContent.trim() : ''};
  });
  return {ready: true, kernel: !!(sc.session && sc.session.kernel), status: sc.kernelDisplayStatus,
          dialog: !!document.querySelector('.jp-Dialog'),
          running: cells.map((c, i) => c.prompt.includes('*') ? i : -1).filter((i) => i >= 0), n: cells.length};
}
"""

# Everything the checks need about the cells, from the model (outputs, errors) and the DOM (rendering).
_CELLS = _PANEL + """
const LAYOUT = ['container', 'box', 'vbox', 'hbox', 'gridbox', 'inline', 'hslider', 'vslider', 'readout'];
(path) => {
  const p = panel(path);
  return p.content.widgets.map((cell, i) => {
    const json = cell.model.toJSON();
    const source = cell.model.sharedModel.getSource();
    const children = [...cell.node.querySelectorAll(':scope .jp-OutputArea-child')];
    const outputs = (json.outputs || []).map((o, k) => {
      const node = children[k] ? children[k].querySelector('.jp-OutputArea-output') : null;
      const data = o.data || {};
      return {type: o.output_type, name: o.name || '', ename: o.ename || '', evalue: o.evalue || '',
              text: (typeof o.text === 'string' ? o.text : (o.text || []).join('')).slice(0, 4000),
              widget: Object.prototype.hasOwnProperty.call(data, '""" + WIDGET_MIME + """'),
              rendered: !!(node && node.querySelector('.jupyter-widgets')),
              shown: node ? node.innerText.trim().slice(0, 300) : null,
              kinds: node ? [...new Set([...node.querySelectorAll('[class*="widget-"]')].flatMap(
                  (e) => [...e.classList].filter((c) => /^widget-[a-z]+$/.test(c)).map((c) => c.slice(7))))]
                  .filter((k) => !LAYOUT.includes(k)) : []};
    });
    return {index: i, type: json.cell_type, head: source.split('\\n')[0].slice(0, 80), empty: !source.trim(),
            count: json.execution_count ?? null, tags: (json.metadata && json.metadata.tags) || [], outputs};
  });
}
"""

# What a widget shows apart from its controls: text, and a fingerprint of each image's source.
_DISPLAY = """
(el) => {
  const clone = el.cloneNode(true);
  clone.querySelectorAll('""" + CONTROLS + """').forEach((c) => c.remove());
  const hash = (s) => {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
    return s.length + ':' + (h >>> 0).toString(16);
  };
  return {text: clone.textContent.replace(/\\s+/g, ' ').trim(),
          images: [...el.querySelectorAll('img')].map((i) => hash(i.getAttribute('src') || ''))};
}
"""

# The control to move: the first enabled slider handle, else the first enabled dropdown menu. (Other
# controls - toggle buttons, list boxes, text - only have to render; the workbench uses none.)
_CONTROL = """
(el) => {
  for (const h of el.querySelectorAll('.widget-slider .noUi-handle')) {
    const target = h.closest('.noUi-target'), box = h.closest('.widget-slider');
    if (target.hasAttribute('disabled') || box.classList.contains('mod-disabled')) continue;
    const label = box.querySelector('.widget-label');
    return {kind: 'slider', index: [...el.querySelectorAll('.widget-slider .noUi-handle')].indexOf(h),
            label: label ? label.textContent.trim() : '', now: h.getAttribute('aria-valuenow'),
            text: h.getAttribute('aria-valuetext'), min: h.getAttribute('aria-valuemin'),
            max: h.getAttribute('aria-valuemax')};
  }
  const selects = [...el.querySelectorAll('.widget-dropdown select')];
  for (const s of selects) {
    if (s.disabled || s.options.length < 2) continue;
    const label = s.closest('.widget-dropdown').querySelector('.widget-label');
    return {kind: 'menu', index: selects.indexOf(s), label: label ? label.textContent.trim() : '',
            now: String(s.selectedIndex), text: s.value, last: s.selectedIndex >= s.options.length - 1};
  }
  return null;
}
"""


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
                   change_seconds: float = CHANGE_SECONDS) -> NotebookReport:
    """Open ``path`` (relative to the server's root) in a new page, run it, use its widgets; see the module doc.

    ``change_seconds``: how long a widget may take to redraw after its control moves.
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
        _run(page, lab, path, screens, stem, deadline, report, change_seconds)
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
         report: NotebookReport, change_seconds: float) -> None:
    phase = time.monotonic()

    def lap(name: str) -> None:
        nonlocal phase
        report.phases[name] = time.monotonic() - phase
        phase = time.monotonic()

    page.goto(lab.url(path), wait_until="domcontentloaded", timeout=deadline.ms(90))
    state = lambda: page.evaluate(_STATE, path)  # noqa: E731

    def kernel_ready() -> bool:
        s = state()
        if s.get("dialog"):  # e.g. "Select Kernel" for a notebook without kernel metadata: take the default
            with contextlib.suppress(Exception):
                page.locator(".jp-Dialog .jp-mod-accept").first.click(timeout=5000)
        return s.get("ready") and s.get("kernel") and s.get("status") == "idle"

    _poll(page, deadline, "the notebook to open and its kernel to start", 120, kernel_ready)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # the notebook, not the file browser
    notebook = page.locator(f'[id="{page.evaluate(_PANEL + "(path) => panel(path).id", path)}"]')

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
        cells = page.evaluate(_CELLS, path)
        pending = [o for c in cells for o in c["outputs"]
                   if o["widget"] and not o["rendered"] and (not o["shown"] or "Loading" in o["shown"])]
        return None if pending else cells

    try:
        cells = _poll(page, deadline, "the widgets to render", 10, settled)
    except BudgetSpent:
        cells = page.evaluate(_CELLS, path)
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
    _full_screenshot(page, screens / f"{stem}.png", report, notebook)
    lap("screenshot")


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
    control = output.evaluate(_CONTROL)
    if control is None:
        return
    before = output.evaluate(_DISPLAY)
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
        display = output.evaluate(_DISPLAY)
        return display if display != before else None

    try:
        _poll(page, deadline, "the widget to redraw", change_seconds, redrawn)
        check.seconds = time.monotonic() - pressed
        check.changed = True
    except BudgetSpent:
        check.changed = False
        report.problems.append(f"cell {check.cell}: moving the {check.control} did not change what the widget "
                               f"shows within {change_seconds:.0f} s (still {_short(output.evaluate(_DISPLAY))!r})")
    _wait_idle(page, deadline, state, max(change_seconds, 30), f"cell {check.cell}'s redraw")
    # the redraw may arrive in parts (summary, then image): describe the settled state
    check.before, check.after = _excerpts(before, output.evaluate(_DISPLAY))
    output.screenshot(path=str(shot), timeout=deadline.ms(30))
    check.screenshot = str(shot)
    report.screenshots.append(str(shot))


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


# ---------------------------------------------------------------------------------------------- self-test
def write_selftest_notebooks(folder: Path) -> dict[str, Path]:
    """Two notebooks that exercise the checks: ``widgets`` must pass; ``broken`` must fail in known ways."""
    import nbformat

    v4 = nbformat.v4
    folder.mkdir(parents=True, exist_ok=True)
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    explorer = (
        "import ipywidgets as w\n"
        "import matplotlib.pyplot as plt\n"
        "from workbench.widgets import Explorer\n"
        "def render(power, kind):\n"
        "    fig, ax = plt.subplots(figsize=(3, 2))\n"
        "    ax.plot(range(10), [i ** power for i in range(10)], label=kind)\n"
        "    plt.close(fig)\n"
        "    return fig, f'<b>{kind}</b>: x to the power {power}'\n")
    widgets = v4.new_notebook(metadata=kernel, cells=[
        v4.new_markdown_cell("# Browser self-test: widgets that respond"),
        v4.new_code_cell("import ipywidgets as w\n"
                         "slider = w.IntSlider(value=2, min=0, max=5, description='n')\n"
                         "label = w.Label('n = 2')\n"
                         "slider.observe(lambda change: setattr(label, 'value', f\"n = {change['new']}\"), 'value')\n"
                         "w.VBox([slider, label])"),
        v4.new_code_cell(explorer + "Explorer({'power': w.IntSlider(value=3, min=1, max=3, description='power', "
                         "continuous_update=False), 'kind': w.Dropdown(options=['a', 'b'], description='kind')}, "
                         "render)"),
        v4.new_code_cell(explorer + "Explorer({'kind': w.Dropdown(options=['a', 'b', 'c'], description='kind')}, "
                         "lambda kind: render(2, kind))"),
        v4.new_code_cell("print('done')"),
    ])
    broken = v4.new_notebook(metadata=kernel, cells=[
        v4.new_code_cell("import ipywidgets as w\n"
                         "w.VBox([w.IntSlider(value=1, max=3, description='dead'), w.Label('never changes')])"),
        v4.new_code_cell("1 / 0"),
        v4.new_code_cell("print('not reached')"),
    ])
    paths = {"widgets": folder / "widgets.ipynb", "broken": folder / "broken.ipynb"}
    nbformat.write(widgets, paths["widgets"])
    nbformat.write(broken, paths["broken"])
    return paths
