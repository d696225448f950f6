# SPDX-License-Identifier: MIT
"""README's "Hosting a benchmark" block runs as written (issue #18): its bash block is extracted from README.md and
run by bash in a temporary directory (the bundled examples linked in as ``examples/``, a free port in place of
8000, this interpreter's ``ubench`` first on PATH); then the upload must become a row of ``/``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("alembic")

from test_serve import _free_port  # noqa: E402  (this directory is on sys.path)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def readme_block() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Hosting a benchmark", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the section should hold one bash block"
    return blocks[0]


def test_readme_serve_block_runs_and_the_upload_becomes_a_row(tmp_path):
    import shutil

    if shutil.which("curl") is None:
        pytest.skip("curl not installed")
    block = readme_block()
    assert "--port 8000" in block and "127.0.0.1:8000" in block  # what is substituted below
    port = _free_port()
    script = "set -e\n" + block.replace("8000", str(port))
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = tmp_path / "out.txt"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # the block's server runs on in this session
        try:
            assert proc.wait(timeout=300) == 0, log.read_text()
            reply = log.read_text()
            assert '"status":"queued"' in reply, reply
            sid = re.search(r'"id":"([0-9a-f-]{36})"', reply).group(1)
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                page = httpx.get(url + "/", timeout=10)
                if sid in page.text:
                    break
                time.sleep(0.5)
            assert f'href="/submissions/{sid}"' in page.text and "deep-ensemble" in page.text
            rows = httpx.get(url + "/api/leaderboard", timeout=10).json()["rows"]
            assert [(r["submission"], r["team"]) for r in rows] == [(sid, "my-team")]
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            time.sleep(1)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert (tmp_path / "srv" / "ubench-serve.db").is_file() and (tmp_path / "ref.h5").is_file()
