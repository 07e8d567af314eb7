"""The README's front door: ``make lab NO_BROWSER=1`` starts JupyterLab and serves ``/lab``, for any user.

Run as a new user would run it (root included: containers and cloud VMs often are), headless on a
free port; the URL it prints is fetched, then the whole process group (make, jupyter and its
children) is stopped. Bounded in time; skipped with a reason where make or jupyter is missing or
the environment would first need installing (that is ``make install``'s job, not this test's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tools.browser.processes import end_group, free_port

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 90
URL = re.compile(r"http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+)")

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]


def _skip_reason() -> str | None:
    if shutil.which("make") is None:
        return "make is not installed"
    if not (ROOT / ".venv" / "bin" / "jupyter").exists():
        return "no .venv/bin/jupyter (run `make install` first)"
    up_to_date = subprocess.run(["make", "-q", "install"], cwd=ROOT, capture_output=True).returncode == 0
    if not up_to_date:
        return "the virtual environment is older than pyproject.toml (`make install` would reinstall first)"
    return None


def test_make_lab_serves_lab_headless(tmp_path: Path) -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    port = free_port()
    log = tmp_path / "lab.log"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    with log.open("wb") as out:
        proc = subprocess.Popen(["make", "lab", "NO_BROWSER=1", f"PORT={port}"], cwd=ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        match = None
        while match is None and time.monotonic() < deadline:
            assert proc.poll() is None, f"make lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            match = URL.search(log.read_text(errors="replace"))
            time.sleep(0.5)
        assert match, f"no URL printed within {STARTUP_SECONDS}s:\n{log.read_text()[-3000:]}"
        assert int(match.group(1)) == port
        with urllib.request.urlopen(match.group(0), timeout=30) as response:
            assert response.status == 200
            assert b"JupyterLab" in response.read()
    finally:
        end_group(proc, wait=10)  # make, jupyter and every child
    assert proc.poll() is not None, "make lab still running after the process group was stopped"
