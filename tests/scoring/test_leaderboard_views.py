# SPDX-License-Identifier: MIT
"""What ``ubench leaderboard``'s three views (the terminal table, ``leaderboard.json``, ``index.html``) show of a
DEE below one deep-ensemble member and of a finding about an upload as a whole (issue #28 leftovers): the DEE reads
"< 1" (never 1, never an empty cell) and the finding names the upload, never the JSON's ``<file>`` placeholder
(which only the ``path`` field keeps, as documented in archive_schema/SPEC.md). One real run of the command."""

from __future__ import annotations

import json
import os
import re

import pytest
from click.testing import CliRunner

from ubench.cli import cli

from html_pages import read_page
from scoring_archives import build_archive


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """Uploads: the 5-member deep ensemble itself (DEE 5), one of its single models' peers that is far worse than
    one member (seed 3, scored against the ensemble's labels: chance accuracy, DEE below 1) and a file that is not
    HDF5; the ensemble is the DEE reference."""
    d = tmp_path_factory.mktemp("leaderboard_views")
    uploads = d / "uploads"
    uploads.mkdir()
    de, _ = build_archive(uploads / "de.h5", m=5)
    build_archive(uploads / "one.h5", m=1, seed=3)
    (uploads / "junk.h5").write_bytes(b"not hdf5")
    ref = d / "ref.h5"
    assert CliRunner().invoke(cli, ["reference", str(de), "--out", str(ref)]).exit_code == 0
    out = d / "board"
    res = CliRunner().invoke(cli, ["leaderboard", str(uploads), "--reference", str(ref), "--out", str(out),
                                   "--ensemble", str(de)])
    assert res.exit_code == 0, res.output
    return d, res, (out / "leaderboard.json").read_text(), (out / "index.html").read_text()


def _column(header: list[str], name: str) -> int:
    return next(j for j, h in enumerate(header) if h.split()[0].rstrip("*") == name)


def test_json_keeps_the_below_one_flag_and_the_placeholder_only_as_a_path(board):
    _, _, text, _ = board
    rows = {r["archive"]: r for r in json.loads(text)["rows"]}
    assert rows["one.h5"]["metrics"]["dee"] is None and rows["one.h5"]["dee_below_one"] is True
    assert rows["de.h5"]["metrics"]["dee"] == 5.0 and rows["de.h5"]["dee_below_one"] is False
    findings = rows["junk.h5"]["findings"]
    assert [f["path"] for f in findings] == ["<file>"] and findings[0]["check"] == "not-hdf5"
    assert text.count("<file>") == text.count('"path": "<file>"') == 1  # no human message carries it


def test_terminal_table_shows_below_one_and_names_no_placeholder(board):
    _, res, _, _ = board
    assert "<file>" not in res.output  # the table, the progress lines (stderr) and the last line
    lines = res.stdout.splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    dee = _column(header, "DEE") - len(header)  # from the right: unranked rows have no rank cells
    cells = {}
    for line in lines[2:lines.index("")]:
        row = re.split(r"\s{2,}", line.strip())
        cells[next(c for c in row if c.endswith(".h5"))] = row[dee]
    assert cells == {"de.h5": "5", "one.h5": "< 1", "junk.h5": "-"}


def test_page_shows_below_one_and_the_findings_upload(board):
    _, _, _, html = board
    assert "&lt;file&gt;" not in html and "<file>" not in html
    table = read_page(html).tables[0]
    header = [h for _, h in table[0]]
    j, upload = _column(header, "DEE"), header.index("upload")
    cells = {row[upload][1]: row for row in table[1:]}
    assert cells["one.h5"][j][1] == "< 1" and cells["de.h5"][j][1] == "5.0000"
    status = cells["junk.h5"][-1][1]
    assert "[not-hdf5] junk.h5: no HDF5 signature" in status, status


def test_a_reference_that_is_no_file_is_named_without_the_placeholder(board, tmp_path):
    """A ``--reference`` refused for the file as a whole (a symbolic link) names the reference once, before any
    upload is read (``scoring/reference.py``)."""
    d, _, _, _ = board
    link = tmp_path / "ref_link.h5"
    os.symlink(d / "ref.h5", link)
    res = CliRunner().invoke(cli, ["leaderboard", str(d / "uploads"), "--reference", str(link), "--out",
                                   str(tmp_path / "b")])
    assert res.exit_code == 2
    assert res.output == (f"error: --reference: reference {link}: {link} is a symbolic link; archives must be "
                          "regular files (not-regular-file)\n")
    assert not (tmp_path / "b").exists()


def test_an_unreadable_ensemble_is_named_as_unscored_in_the_json(board):
    """``--ensemble`` naming a file that is not an archive: the board is built without DEE and
    ``leaderboard.json``'s ``ensemble.note`` says the ensemble was not scored and why (the check and the file),
    not that its report lacks a curve."""
    d, _, _, _ = board
    out = d / "board_bad_ensemble"
    res = CliRunner().invoke(cli, ["leaderboard", str(d / "uploads"), "--reference", str(d / "ref.h5"),
                                   "--out", str(out), "--ensemble", str(d / "uploads" / "junk.h5")])
    assert res.exit_code == 0, res.output
    board_json = json.loads((out / "leaderboard.json").read_text())
    note = board_json["ensemble"]["note"]
    assert board_json["ensemble"]["cll_curve"] is None and "dee" not in {c["key"] for c in board_json["columns"]}
    assert note.startswith("the deep-ensemble archive was not scored (unreadable: [not-hdf5] junk.h5: ") and "junk.h5" in note
    assert "CLL-versus-members" not in note and "<file>" not in note
