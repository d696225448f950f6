# SPDX-License-Identifier: MIT
"""Each route's answers in detail (issue #27 item 8: the slips mutation testing of serve/app.py found no test for):
the exact status and one-line error of every refusal, the Authorization header's scheme and spacing, every field of
a submission's status against the database's own record, the board's paging edges, the report page's 404s and what
a hidden board says. Real servers on loopback (test_serve.Server) over SQLite, one per phase for the module."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import time
from pathlib import Path

import pytest

from test_serve import EXAMPLE, httpx, wait_intervals  # noqa: E402
from test_serve_hostile import EXAMPLES, JUNK, Host, _Held, reference, upload  # noqa: E402, F401 (a fixture)

UNKNOWN = "missing, unknown or revoked bearer token"
BAD_PAGING = "format is json or csv, offset at least 0, limit 1 to 1000"
UNTIL = "2999-01-01T00:00:00+00:00"  # --hidden-until 2999-01-01T00:00:00 read as UTC


@pytest.fixture(scope="module")
def site(tmp_path_factory, reference):
    """A public server, on a host whose locale is ASCII, with two teams: alpha's scored upload ("de") and rejected
    one, beta's scored upload ("sgd"), every report drawn and both rows' rank intervals computed."""
    h = Host(tmp_path_factory.mktemp("routes"), reference, None, "alpha", "beta")
    try:  # a setup that fails (under a mutant too) stops its server
        with pytest.MonkeyPatch.context() as env:  # an ASCII locale: files are read and written as UTF-8
            env.setenv("LC_ALL", "C")
            env.setenv("PYTHONUTF8", "0")
            env.setenv("PYTHONCOERCECLOCALE", "0")
            srv = h.server()
        data = {"scored": EXAMPLE.read_bytes(), "rejected": JUNK, "beta": (EXAMPLES / "digits_sgd.h5").read_bytes()}
        sent = {"scored": upload(srv, h.tokens["alpha"], data["scored"], method="de"),
                "rejected": upload(srv, h.tokens["alpha"], data["rejected"], method="junk"),
                "beta": upload(srv, h.tokens["beta"], data["beta"], method="sgd")}
        for name, r in sent.items():  # the 202 answer: the id, "queued" and the bytes' sha256, nothing else
            assert r.status_code == 202, r.text
            assert set(r.json()) == {"id", "status", "sha256"} and r.json()["status"] == "queued"
            assert r.json()["sha256"] == hashlib.sha256(data[name]).hexdigest()
        ids = {name: r.json()["id"] for name, r in sent.items()}
        for _ in range(600):
            done = {s for (s,) in h.sql("select status from submissions")} <= {"scored", "rejected"}
            if done and len(list((h.data / "reports").glob("*.html"))) == 2:
                break
            time.sleep(0.2)
        wait_intervals(srv, 2)
        yield h, srv, ids, data
    finally:
        h.stop()


def _get(srv, path: str, token: str | None = None, scheme: str = "Bearer ", **params) -> httpx.Response:
    headers = {} if token is None else {"Authorization": scheme + token}
    return httpx.get(srv.url + path, headers=headers, params=params, timeout=30)


def _record(h: Host, sid: str) -> dict:
    (key,) = h.sql(f"select result_key from submissions where id = '{sid}'")[0]
    return json.loads(h.sql(f"select record from results where key = '{key}'")[0][0])


def _stored_board(h: Host) -> dict:
    from ubench.serve.db import Database

    db = Database.for_data_dir(h.data, None)
    try:
        return db.board_page(0, None)
    finally:
        db.engine.dispose()


def test_every_refusal_is_its_status_and_one_line_naming_what_is_wrong(site):
    h, srv, ids, _ = site
    alpha, beta = h.tokens["alpha"], h.tokens["beta"]
    form = {"files": {"method": (None, "x")}, "timeout": 30}
    refused = [httpx.post(srv.url + "/api/submissions", headers=headers, **form) for headers in
               ({}, {"Authorization": alpha}, {"Authorization": "Basic " + alpha}, {"Authorization": "Bearer x"})]
    refused += [_get(srv, f"/api/submissions/{ids['scored']}", token) for token in (None, "wrong")]
    refused.append(_get(srv, f"/api/submissions/{ids['scored']}", alpha, scheme="Token "))
    assert [(r.status_code, r.json()) for r in refused] == [(401, {"error": UNKNOWN})] * len(refused)
    # another team's submission is a 404 naming the id and the asking team, like an unknown id (cut at 40)
    r = _get(srv, f"/api/submissions/{ids['scored']}", beta)
    assert (r.status_code, r.json()) == (404, {"error": f"no submission '{ids['scored']}' for team 'beta'"})
    r = _get(srv, "/api/submissions/" + "z" * 50, alpha)
    assert (r.status_code, r.json()) == (404, {"error": f"no submission '{'z' * 40}' for team 'alpha'"})
    for params in ({"format": "xml"}, {"format": "CSV"}, {"offset": -1}, {"limit": 0}, {"limit": 1001}):
        r = _get(srv, "/api/leaderboard", **params)
        assert (r.status_code, r.json()) == (400, {"error": BAD_PAGING}), params
    r = _get(srv, "/api/no-such-route")
    assert (r.status_code, r.json()) == (404, {"error": "not found"})
    for sid in ("no-such-id", ids["rejected"]):  # a report is a scored submission's only
        r = _get(srv, f"/submissions/{sid}")
        assert r.status_code == 404 and r.text.endswith("<p>No scored submission with that id.</p>")


def test_the_bearer_scheme_is_read_in_any_case_and_the_token_trimmed(site):
    h, srv, ids, _ = site
    for scheme in ("Bearer ", "bearer ", "BEARER ", "bEaReR    "):
        r = _get(srv, f"/api/submissions/{ids['scored']}", h.tokens["alpha"], scheme=scheme)
        assert (r.status_code, r.json()["id"]) == (200, ids["scored"]), scheme


def test_a_status_holds_every_field_of_the_submission_and_its_record(site):
    h, srv, ids, data = site
    token = h.tokens["alpha"]
    scored = _get(srv, f"/api/submissions/{ids['scored']}", token).json()
    assert set(scored) == {"id", "status", "sha256", "size", "method", "created", "started", "finished", "summary",
                           "report"}
    assert (scored["id"], scored["status"], scored["method"], scored["report"]) == (
        ids["scored"], "scored", "de", f"/submissions/{ids['scored']}")
    assert (scored["sha256"], scored["size"]) == (hashlib.sha256(data["scored"]).hexdigest(), len(data["scored"]))
    times = [dt.datetime.fromisoformat(scored[k]) for k in ("created", "started", "finished")]
    assert times == sorted(times)
    assert scored["summary"] == _record(h, ids["scored"])["outcome"]["report"]["summary"]

    rejected = _get(srv, f"/api/submissions/{ids['rejected']}", token).json()
    assert set(rejected) == {"id", "status", "sha256", "size", "method", "created", "started", "finished",
                             "findings", "outcome"}
    outcome = _record(h, ids["rejected"])["outcome"]
    errors = [f for f in outcome["findings"] if f["severity"] == "error"]
    assert errors and rejected["findings"] == errors
    assert (rejected["status"], rejected["outcome"], rejected["size"]) == ("rejected", outcome["status"], len(JUNK))


def test_the_board_pages_by_offset_and_limit_and_says_what_it_holds(site):
    h, srv, ids, _ = site
    answer = _get(srv, "/api/leaderboard")
    assert answer.headers["content-type"] == "application/json"
    whole = answer.json()
    assert (whole["limit"], whole["offset"], whole["total"]) == (100, 0, 2)
    assert [r["submission"] for r in whole["rows"]] == [ids["scored"], ids["beta"]]
    assert [r["rank"] for r in whole["rows"]] == [1, 2] and [r["rank_interval"] for r in whole["rows"]] == [[1, 1],
                                                                                                          [2, 2]]
    assert whole["counts"] == {"scored": 2, "rejected": 1}
    stored = _stored_board(h)  # the database's own page: when it was stored, and what it was built from
    assert whole["generated"] == stored["generated"].isoformat()
    assert whole["rank_intervals"] == {**stored["intervals"], "stale": False}
    assert stored["intervals"]["built_from"] == stored["built_from"]
    for offset, limit, want in ((0, 1, [0]), (1, 1, [1]), (1, 1000, [1]), (2, 1, []), (0, 1000, [0, 1])):
        page = _get(srv, "/api/leaderboard", offset=offset, limit=limit).json()
        assert (page["offset"], page["limit"], page["total"]) == (offset, limit, 2)
        assert page["rows"] == [whole["rows"][i] for i in want], (offset, limit)
    got = _get(srv, "/api/leaderboard", format="csv", limit=1, offset=1)  # every row, whatever the paging
    assert got.headers["content-type"] == "text/csv; charset=utf-8"
    assert [row["submission"] for row in csv.DictReader(io.StringIO(got.text))] == [ids["scored"], ids["beta"]]


def test_pages_before_the_first_are_the_first_and_the_report_page_is_the_drawn_file(site):
    h, srv, ids, _ = site
    first = _get(srv, "/").text
    assert ids["scored"] in first and ids["beta"] in first
    assert [_get(srv, "/", page=p).text for p in (1, 0, -3)] == [first] * 3
    assert '<p class="meta">rows 1-2 of 2 (page 1 of 1) </p>' in first
    assert "over the 2 ranked rows then on the board.</p>" in first  # the intervals are current: no stale note
    second = _get(srv, "/", page=2)  # past the last page: no rows, and a link back
    assert second.status_code == 200 and ids["scored"] not in second.text
    assert '<p class="meta">rows 101-2 of 2 (page 2 of 1) <a href="/?page=1">previous</a></p>' in second.text
    (key,) = h.sql(f"select result_key from submissions where id = '{ids['scored']}'")[0]
    drawn = h.data / "reports" / f"{key}.html"
    r = _get(srv, f"/submissions/{ids['scored']}")
    assert (r.status_code, r.text) == (200, drawn.read_text(encoding="utf-8"))
    assert r.headers["content-security-policy"] == _get(srv, "/").headers["content-security-policy"]
    aside = drawn.with_name("aside")
    drawn.rename(aside)
    try:
        r = _get(srv, f"/submissions/{ids['scored']}")
    finally:
        aside.rename(drawn)
    assert r.status_code == 404 and r.text.endswith("<p>This report&#x27;s page is being drawn (or could not be); the "
                                                    "numbers are on the leaderboard.</p>")


@pytest.fixture(scope="module")
def hidden(tmp_path_factory, reference):
    """A server before its --hidden-until, with two uploads per day and one at a time, whose uploads have 20 s
    (under the minute a reservation outlives its upload's deadline by): alpha's first upload."""
    h = Host(tmp_path_factory.mktemp("hidden"), reference, None, "alpha", "beta")
    try:  # a setup that fails (under a mutant too) stops its server
        srv = h.server("--hidden-until", "2999-01-01T00:00:00", "--max-per-day", "2", "--max-concurrent", "1",
                       "--upload-timeout", "20")
        r = upload(srv, h.tokens["alpha"], JUNK)
        assert r.status_code == 202
        yield h, srv, r.json()["id"]
    finally:
        h.stop()


def test_a_hidden_board_says_until_when(hidden):
    h, srv, sid = hidden
    for params in ({}, {"format": "csv"}, {"limit": 0}):
        r = _get(srv, "/api/leaderboard", **params)
        assert (r.status_code, r.json()) == (403, {"error": f"results are hidden until {UNTIL}"}), params
    r = _get(srv, "/")
    assert r.status_code == 200 and r.text.endswith(f"<p>Results are hidden until {UNTIL}.</p>")
    status = _get(srv, f"/api/submissions/{sid}", h.tokens["alpha"]).json()
    assert (status["id"], status["hidden_until"]) == (sid, UNTIL) and "started" not in status


def test_the_quotas_count_to_their_limit_and_name_the_team_and_the_limit(hidden):
    """Per day: the second upload is accepted, the third refused. At a time: an upload held open counts for as
    long as its deadline allows (a deadline under a minute included), and the next one is refused until it ends."""
    h, srv, _ = hidden
    alpha, beta = h.tokens["alpha"], h.tokens["beta"]
    assert upload(srv, alpha, JUNK + b"2").status_code == 202
    r = upload(srv, alpha, JUNK + b"3")
    assert (r.status_code, r.json()) == (429, {"error": "team 'alpha' already has 2 uploads in 24 hours"})
    held = _Held(srv.port, beta)
    try:
        assert held.answered(1.0) is None  # still being read
        r = upload(srv, beta, JUNK)
        assert (r.status_code, r.json()) == (429, {"error": "team 'beta' already has 1 uploads in progress"})
    finally:
        assert held.finish()[0] == 202
    assert upload(srv, beta, JUNK).status_code == 202  # its place is free again
