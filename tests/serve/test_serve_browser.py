# SPDX-License-Identifier: MIT
"""The service's pages in headless Chromium (Debian's ``chromium``, driven by Playwright with that executable):
every scored row renders, sorting by CLL works, and hostile method names are shown as text and run nothing
(issue #18 item 9)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from test_serve import EXAMPLE, Server, _ubench, wait_board  # the same real server (this directory is on sys.path)

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")]

EXAMPLES = Path(EXAMPLE).parent
HOSTILE = ['<img src=x onerror="document.title=\'pwned\'">', "<script>document.title='pwned'</script>"]


def test_board_renders_sorts_and_runs_no_upload_script(tmp_path):
    ref = tmp_path / "ref.h5"
    assert _ubench("reference", EXAMPLE, "--out", ref).returncode == 0
    data = tmp_path / "srv"
    token = _ubench("serve", "team", "add", "<b>team</b>", "--data-dir", data).stdout.strip()
    srv = Server(data, ref).start()
    try:
        ids = [srv.upload(token, EXAMPLES / name, method=HOSTILE[i % 2]).json()["id"]
               for i, name in enumerate(("digits_deep_ensemble.h5", "digits_sgd.h5", "digits_mc_dropout.h5"))]
        for sid in ids:
            assert srv.wait_done(token, sid)["status"] == "scored"
        assert wait_board(srv, 3)["total"] == 3
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(srv.url + "/")
            assert page.title() == "ubench leaderboard"
            rows = page.locator("#board tbody tr")
            assert rows.count() == 3
            assert page.locator("#board tbody").inner_text().count("<img src=x") == 2  # shown as text
            assert page.locator("#board img").count() == 0 and page.locator("#board script").count() == 0

            def cll_column() -> list[float]:
                head = [h.strip() for h in page.locator("#board thead th").all_inner_texts()]
                col = next(i for i, h in enumerate(head) if h.startswith("CLL"))
                return [float(r.locator("td").nth(col).get_attribute("data-v")) for r in rows.all()]

            first = cll_column()
            assert first == sorted(first, reverse=True)  # ranked by CLL
            page.locator("#board thead th", has_text="CLL").click()
            assert cll_column() == sorted(first)  # ascending after one click
            page.locator("#board thead th", has_text="CLL").click()
            assert cll_column() == sorted(first, reverse=True)
            page.goto(f"{srv.url}/submissions/{ids[0]}")
            assert page.title() != "pwned" and "pwned" not in page.title()
            assert errors == []
            browser.close()
    finally:
        srv.stop()
