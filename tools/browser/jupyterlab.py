"""A JupyterLab server for the browser checks, and the copy of the notebooks it serves.

``JupyterLab`` starts ``python -m jupyterlab`` (this interpreter: the project's ``.venv``) on a free
loopback port with a random token, in its own process group, with its config, data, runtime,
settings and workspace folders in a temporary directory (no user state leaks in, no news or update
checks, no terminals). ``stage`` copies the notebooks it serves, so JupyterLab's autosave never
touches the committed ones. ``stop()`` shuts the server and its kernels down and kills whatever of
it is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .processes import Deadline, descendants, die_with_parent, end_group, free_port, reap


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
                                         preexec_fn=die_with_parent())
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
            family = descendants(proc.pid)  # kernels run in sessions of their own: find them now
            with contextlib.suppress(OSError, urllib.error.URLError):
                self._api("POST", "/api/shutdown", timeout=5)  # stops the kernels, then the server
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                killed.append(f"jupyterlab {proc.pid}")
                end_group(proc, wait=5)
            killed += reap(family)
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
