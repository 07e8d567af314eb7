"""``make lab`` opens JupyterLab without the news popup: the notification plugin's ``fetchNews`` reads
"false" (JupyterLab asks "get notified about official Jupyter news?" while it is "none") and the server
fetches no news feed.

Runs the very command ``make lab`` would run (``make -n`` prints it, so a stale install is not redone
here), headless on a free port, asks the server for the plugin's settings and the news, then stops the
whole process group.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tools.browser.processes import end_group, free_port

ROOT = Path(__file__).resolve().parents[2]
URL = re.compile(r"http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+)")
PLUGIN = "@jupyterlab/apputils-extension:notification"

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]


def lab_command(port: int) -> list[str]:
    dry = subprocess.run(["make", "-n", "lab", "NO_BROWSER=1", f"PORT={port}"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.replace("\\\n", " ")
    line = next(line for line in dry.splitlines() if re.match(r"\S*/bin/jupyter lab\b", line.strip()))
    return shlex.split(line)


def test_make_lab_has_no_news_popup(tmp_path: Path) -> None:
    if shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("make or .venv/bin/jupyter missing (run `make install` first)")
    port = free_port()
    command = lab_command(port)
    assert "--LabApp.news_url=None" in command
    log = tmp_path / "lab.log"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings")}  # a first start: no answer saved yet
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, match = time.monotonic() + 90, None
        while match is None and time.monotonic() < deadline:
            assert proc.poll() is None, f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            match = URL.search(log.read_text(errors="replace"))
            time.sleep(0.5)
        assert match, f"no URL printed:\n{log.read_text()[-3000:]}"
        base, token = f"http://127.0.0.1:{port}", match.group(2)

        def get(path: str) -> dict:
            with urllib.request.urlopen(f"{base}{path}?token={token}", timeout=30) as response:
                return json.loads(response.read())

        # the server folds overrides.json into the schema's defaults; a first start has no user settings on top
        reply = get(f"/lab/api/settings/{PLUGIN}")
        defaults = {name: spec.get("default") for name, spec in reply["schema"]["properties"].items()}
        assert reply["settings"] == {}, reply["settings"]
        assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False, defaults
        assert get("/lab/api/news")["news"] == []
    finally:
        end_group(proc, wait=10)
