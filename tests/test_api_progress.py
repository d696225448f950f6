# SPDX-License-Identifier: MIT
"""One progress style with a time-left estimate across commands (issue #10 item 6): ``ubench/progress.py``."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "scoring"))
from scoring_archives import build_archive  # noqa: E402

from ubench.cli import cli  # noqa: E402
from ubench.progress import ProgressDisplay, TrainingProgress, format_seconds  # noqa: E402


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _plain(**kwargs):
    out, clock = io.StringIO(), FakeClock()
    return ProgressDisplay(live=False, stream=out, clock=clock, **kwargs), out, clock


@pytest.mark.parametrize("seconds, text", [(0, "0:00"), (7.4, "0:07"), (750, "12:30"), (3723, "1:02:03")])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_plain_lines_carry_the_time_left_at_the_mean_pace():
    """4 epochs; the first takes 10 s: 30 s left; a run resumed at epoch 2 counts only the epochs it ran."""
    d, out, clock = _plain()
    d.start("epochs", "epochs", 4, each=True)
    clock.t = 10
    d.update("epochs", 1, info="loss 0.5")
    clock.t = 30
    d.update("epochs", 2, info="loss 0.4")
    clock.t = 40
    d.start("epochs", "epochs", 4, done=2, each=True)  # resumed: 2 done already
    clock.t = 46
    d.update("epochs", 3)
    clock.t = 52
    d.update("epochs", 4)
    assert out.getvalue().splitlines() == [
        "epochs: 1/4  loss 0.5  elapsed 0:10, ~0:30 left",
        "epochs: 2/4  loss 0.4  elapsed 0:30, ~0:30 left",
        "epochs: 3/4  elapsed 0:06, ~0:06 left",
        "epochs: 4/4  elapsed 0:12",
    ]
    assert d.eta("epochs") == 0


def test_quick_tasks_stay_quiet_and_slow_ones_are_logged():
    """A split read in under ``quiet_below`` seconds writes nothing; a slow one writes one line when done."""
    d, out, clock = _plain(quiet_below=2.0)
    cb = d.scoring_callback("run.h5: ")
    cb("test", 50, 100)
    clock.t = 1.0
    cb("test", 100, 100)
    cb("ood", 10, 100)
    clock.t = 4.0
    cb("ood", 100, 100)
    assert out.getvalue().splitlines() == ["run.h5: ood: 100/100  elapsed 0:03"]


def test_descriptions_are_escaped_and_markup_is_not_interpreted():
    """Plain and live: a control sequence from an upload's split name is shown escaped; rich markup in it is
    shown as text."""
    d, out, clock = _plain(quiet_below=0)
    d.scoring_callback()("[bold]x[/bold]\x1b[2J", 1, 1)
    assert out.getvalue() == "[bold]x[/bold]\\x1b[2J: 1/1  elapsed 0:00\n"
    live_out = io.StringIO()
    live = ProgressDisplay(live=True, stream=live_out)
    live.start("k", "[bold]x[/bold]\x1b[2J", 2)
    live.update("k", 2, info="[red]i[/red]")
    live.close()
    text = live_out.getvalue()
    assert "[bold]x[/bold]\\x1b[2J" in text and "[red]i[/red]" in text and "\x1b[2J" not in text


def test_training_progress_writes_one_line_per_epoch_and_member():
    d, out, clock = _plain()
    p = TrainingProgress(d)
    for member in range(2):
        p.member(member, 2, "deep_ensemble")
        p.epochs(2, 0, "deep_ensemble")
        for epoch in (1, 2):
            clock.t += 5
            p.epoch_done(epoch, 0.5 / epoch, 0.25 * epoch)
    p.close()
    assert out.getvalue().splitlines() == [
        "deep_ensemble epochs (0/2 members done): 1/2  loss 0.5000 acc 0.2500  elapsed 0:05, ~0:05 left",
        "deep_ensemble epochs (0/2 members done): 2/2  loss 0.2500 acc 0.5000  elapsed 0:10",
        "deep_ensemble members: 1/2  elapsed 0:10, ~0:10 left",
        "deep_ensemble epochs (1/2 members done): 1/2  loss 0.5000 acc 0.2500  elapsed 0:05, ~0:05 left",
        "deep_ensemble epochs (1/2 members done): 2/2  loss 0.2500 acc 0.5000  elapsed 0:10",
        "deep_ensemble members: 2/2  elapsed 0:20",
    ]


def test_the_whole_run_has_a_time_left_from_its_epochs_and_predictions():
    """Hand-worked: 2 members of 2 epochs, 3 splits each; epochs take 10 s, a split 4 s. After the first epoch:
    3 epochs left x 10 s, prediction not measured yet. After member 1's first split: 2 epochs x 10 s + 5 splits x
    4 s = 40 s; after its third: 20 + 3 x 4 = 32 s; after member 2's first epoch: 10 + 12 = 22 s; at the end 0
    (issue #28 item 10: the first ETA covered the current member only)."""
    d, out, clock = _plain()
    p = TrainingProgress(d)
    p.plan(epochs=4, predictions=6)
    lefts = []
    for member in range(2):
        p.member(member, 2, "de")
        p.epochs(2, 0, "de")
        for epoch in (1, 2):
            clock.t += 10
            p.epoch_done(epoch, 0.5)
            lefts.append(p.run_left())
        p.predicting(0, 3)
        for split in (1, 2, 3):
            clock.t += 4
            p.predicting(split, 3)
            lefts.append(p.run_left())
    p.close()
    assert lefts == [
        "run: ~0:30 of training left, then prediction", "run: ~0:20 of training left, then prediction",
        "run ~0:40 left", "run ~0:36 left", "run ~0:32 left",
        "run ~0:22 left", "run ~0:12 left", "run ~0:08 left", "run ~0:04 left", "run ~0:00 left"]
    text = out.getvalue()
    assert "de epochs (0/2 members done): 1/2  loss 0.5000; run: ~0:30 of training left, then prediction" in text
    assert "de predicting member 2: splits: 3/3  run ~0:00 left" in text


def test_an_every_task_writes_at_most_one_line_per_interval_and_its_last():
    d, out, clock = _plain()
    d.start("p", "splits", 41, each=True, every=20.0)
    for k in range(1, 42):
        clock.t += 3
        d.update("p", k)
    done = [int(ln.split(": ")[1].split("/")[0]) for ln in out.getvalue().splitlines()]
    assert done == [7, 14, 21, 28, 35, 41]  # every 21 s (7 splits of 3 s), and the 41st


def test_produce_warns_up_front_of_a_long_run():
    """The warning's numbers by hand: 20 members on 40 splits of 10,000 images (MC dropout's default passes on
    Fashion-MNIST's default splits) are 8.0 million predictions and 20 x 400,000 x 10 x 4 bytes = 305 MiB; the
    README's 5-member deep ensemble (2.0 million) is not warned about."""
    from ubench.producers.command import long_run_note

    note = long_run_note([10_000] * 40, 10, 20)
    assert "20 members predict 40 splits of 400,000 images" in note and "8.0 million predictions" in note
    assert "about 305 MiB" in note and "--members" in note and "--shifts" in note
    assert long_run_note([10_000] * 40, 10, 5) is None


def test_compare_off_a_terminal_logs_each_archive(tmp_path):
    a, _ = build_archive(tmp_path / "a.h5", shifts=(), m=2, n=40)
    b, _ = build_archive(tmp_path / "b.h5", shifts=(), m=3, n=40)
    res = CliRunner().invoke(cli, ["compare", str(a), str(b)])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("archives scored")]
    assert [ln.split("  ")[0:2] for ln in lines] == [["archives scored: 1/2", "a.h5"],
                                                     ["archives scored: 2/2", "b.h5"]]
    assert re.search(r"elapsed \d+:\d\d, ~\d+:\d\d left", lines[0])
    quiet = CliRunner().invoke(cli, ["compare", str(a), str(b), "--json"])
    assert quiet.stderr == ""


def test_leaderboard_logs_each_upload_with_time_left(tmp_path):
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    trusted, _ = build_archive(tmp_path / "trusted.h5", shifts=(), m=2, n=40)
    for seed, name in enumerate(("u1.h5", "u2.h5")):
        build_archive(uploads / name, shifts=(), m=2, n=40, seed=seed + 1)
    runner = CliRunner()
    assert runner.invoke(cli, ["reference", str(trusted), "--out", str(tmp_path / "ref.h5")]).exit_code == 0
    res = runner.invoke(cli, ["leaderboard", str(uploads), "--reference", str(tmp_path / "ref.h5"),
                              "--out", str(tmp_path / "board")])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("uploads scored")]
    assert len(lines) == 2
    assert lines[0].startswith("uploads scored: 1/2  u1.h5: ok  elapsed ") and "left" in lines[0]
    assert lines[1].startswith("uploads scored: 2/2  u2.h5: ok  elapsed ")
    # the same board as CSV (a second run reads the cache): one row per upload, the metrics of leaderboard.json
    again = runner.invoke(cli, ["leaderboard", str(uploads), "--reference", str(tmp_path / "ref.h5"),
                                "--out", str(tmp_path / "board"), "--csv"])
    assert again.exit_code == 0, again.output
    assert "(cached)" in again.stderr
    board = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    rows = list(csv.DictReader(io.StringIO(again.stdout)))
    assert [r["upload"] for r in rows] == [r["archive"] for r in board["rows"]]
    for row, ref_row in zip(rows, board["rows"]):
        assert int(row["rank"]) == ref_row["rank"] and row["status"] == "ok"
        for key, value in ref_row["metrics"].items():
            assert (row[key] == "") if value is None else float(row[key]) == value, key


@pytest.mark.torch
def test_produce_off_a_terminal_writes_one_line_per_epoch(tmp_path):
    """``ubench produce`` under nohup: one plain line per epoch with loss, training accuracy and time left,
    and one per member, instead of silence."""
    pytest.importorskip("torch")
    out = tmp_path / "run.h5"
    res = CliRunner().invoke(cli, ["produce", "deep_ensemble", "--out", str(out), "--members", "2", "--epochs", "2",
                                   "--train-samples", "120", "--test-samples", "60", "--shifts", "none",
                                   "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(out)
    epochs = [ln for ln in res.stderr.splitlines() if " epochs " in ln]
    assert len(epochs) == 4
    run = r"(; run( ~\d+:\d\d left|: ~\d+:\d\d of training left, then prediction))?"  # the whole run's time left
    pattern = (r"deep_ensemble epochs \([01]/2 members done\): [12]/2  loss \d+\.\d{4} acc (0|1)\.\d{4}" + run +
               r"  elapsed \d+:\d\d")
    assert all(re.fullmatch(pattern + r"(, ~\d+:\d\d left)?", ln) for ln in epochs), epochs
    assert "; run" in epochs[0] and "then prediction" in epochs[0]  # no prediction measured yet
    assert "; run ~" in epochs[2]  # the second member's epochs: training and prediction both measured
    assert [ln.split("  ")[0] for ln in res.stderr.splitlines() if " members: " in ln] == \
        ["deep_ensemble members: 1/2", "deep_ensemble members: 2/2"]
    lines = res.stderr.splitlines()
    assert lines[0].startswith("preparing digits: splits: 2/2")  # the data, before training (test + uniform OOD)
    predicting = [ln for ln in lines if " predicting member " in ln]
    assert [ln.split(":")[0] for ln in predicting] == ["deep_ensemble predicting member 1",
                                                       "deep_ensemble predicting member 2"]
    silent = CliRunner().invoke(cli, ["produce", "sgd", "--out", str(tmp_path / "s.h5"), "--epochs", "1",
                                      "--train-samples", "60", "--test-samples", "30", "--shifts", "none",
                                      "--threads", "1", "--no-progress"])
    assert silent.exit_code == 0 and silent.stderr == ""
