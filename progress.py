# SPDX-License-Identifier: MIT
"""The one progress style of every long ``ubench`` command, on stderr: what is running, how far, time left.

On a terminal a :class:`ProgressDisplay` draws ``rich`` bars (description, bar, done/total, an info field such as
``loss 0.41 acc 0.87``, elapsed time and the estimated time left). Anywhere else (a pipe, ``nohup``, a cluster
log) it writes one plain line per finished unit (an epoch, a member, an archive, an upload; a split or the
member curves when they took a while) instead of staying silent:

    deep_ensemble epochs (1/5 members done): 3/20  loss 0.4123 acc 0.8731  elapsed 0:12, ~1:08 left

``produce`` reports the data it prepares (split by split), members, epochs and each member's prediction (split by
split), every line with the time left of the whole run (:class:`TrainingProgress`); ``score``/``compare``/``dee``
each split and the member curves, ``leaderboard`` each upload. The time left of a task is the mean time per unit
since the task started (units already done when it started, such as a resumed run's epochs, are not counted) times
the units left. Every description and info string is escaped (``scoring/text.py``), and no rich markup in it is
interpreted.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["ProgressDisplay", "TrainingProgress", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``m:ss`` below an hour, ``h:mm:ss`` above (``0:07``, ``12:30``, ``1:02:03``)."""
    s = max(0, int(round(seconds)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


@dataclass
class _Task:
    description: str
    total: int
    done: int
    started: float
    start_done: int
    each: bool
    transient: bool = False
    info: str = ""
    bar: Any = field(default=None)
    every: float | None = None  # plain lines of an ``each`` task: at most one per ``every`` seconds, and the last
    last_line: float = 0.0


class ProgressDisplay:
    """Progress of one command on ``stream`` (stderr by default).

    Parameters
    ----------
    live : draw rich bars (``True``), write plain lines (``False``); default: bars when ``stream`` is a terminal.
    stream : where to write (default ``sys.stderr``).
    clock : seconds, monotonic (tests pass a fake one).
    quiet_below : plain lines only: a task started with ``each=False`` that finishes in fewer seconds writes
        nothing (a split read in a blink is not worth a log line; a slow one, or the member curves, is).

    Use :meth:`start` for a task (a key, a description, a total), :meth:`update` as it advances, :meth:`close`
    at the end. A plain line is written at every update of a task started with ``each=True`` (epochs, members,
    archives, uploads), and when any other task finishes after ``quiet_below`` seconds or more.
    """

    def __init__(self, *, live: bool | None = None, stream: IO[str] | None = None,
                 clock: Callable[[], float] = time.monotonic, quiet_below: float = 2.0):
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) if live is None else live
        self.clock = clock
        self.quiet_below = quiet_below
        self.tasks: dict[str, _Task] = {}
        self._bars = None

    # -- tasks -------------------------------------------------------------------------------------------------
    def start(self, key: str, description: str, total: int, *, done: int = 0, each: bool = False,
              since: float | None = None, transient: bool = False, every: float | None = None) -> None:
        """Start (or restart) task ``key``: ``total`` units, ``done`` of them finished already; ``since`` is when
        its work began on :attr:`clock` (default now); a ``transient`` task's bar goes when it finishes; an
        ``each`` task with ``every`` writes a plain line at most every ``every`` seconds (and at its last unit)."""
        from .scoring.text import escape_text

        old = self.tasks.get(key)
        started = self.clock() if since is None else since
        task = _Task(escape_text(description), int(total), int(done), started, int(done), each, transient,
                     every=every, last_line=started)
        self.tasks[key] = task
        if self.live:
            bars = self._live_bars()
            if old is not None and old.bar is not None:
                bars.remove_task(old.bar)
            task.bar = bars.add_task(task.description, total=task.total, completed=task.done, info="")

    def update(self, key: str, done: int, *, info: str = "") -> None:
        """Task ``key`` has ``done`` units finished; ``info`` is shown beside it (``loss 0.41``)."""
        from .scoring.text import escape_text

        task = self.tasks[key]
        task.done, task.info = int(done), escape_text(info)
        if self.live:
            bars = self._live_bars()
            bars.update(task.bar, completed=task.done, info=task.info)
            if task.transient and task.done >= task.total:
                bars.remove_task(task.bar)
                task.bar = None
        elif task.each and task.every is not None:
            now = self.clock()
            if task.done >= task.total or now - task.last_line >= task.every:
                task.last_line = now
                self._line(task)
        elif task.each or (task.done >= task.total and self.clock() - task.started >= self.quiet_below):
            self._line(task)

    def eta(self, key: str) -> float | None:
        """Seconds left of task ``key`` at the mean pace since it started, or None before its first unit."""
        task = self.tasks[key]
        units = task.done - task.start_done
        if units <= 0:
            return None
        return (self.clock() - task.started) / units * max(0, task.total - task.done)

    def close(self) -> None:
        """Stop drawing (the bars stay on screen)."""
        if self._bars is not None:
            self._bars.stop()
            self._bars = None

    # -- adapters for the library's callbacks -----------------------------------------------------------------
    def scoring_callback(self, prefix: str = "") -> Callable[[str, int, int], None]:
        """A ``progress(task, done, total)`` for ``scoring.score.run_score`` (each split as it is read, the
        member curves): every new ``task`` name starts a transient task, ``prefix`` names the archive."""

        def update(task: str, done: int, total: int) -> None:
            key = f"{prefix}{task}"
            if key not in self.tasks or self.tasks[key].total != total or done < self.tasks[key].done:
                self.start(key, key, total, transient=True)
            self.update(key, done)

        return update

    # -- output ------------------------------------------------------------------------------------------------
    def _line(self, task: _Task) -> None:
        elapsed = self.clock() - task.started
        units = task.done - task.start_done
        left = "" if units <= 0 or task.done >= task.total else \
            f", ~{format_seconds(elapsed / units * (task.total - task.done))} left"
        info = f"  {task.info}" if task.info else ""
        self.stream.write(f"{task.description}: {task.done}/{task.total}{info}  "
                          f"elapsed {format_seconds(elapsed)}{left}\n")
        self.stream.flush()

    def _live_bars(self):
        if self._bars is None:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._bars = Progress(
                TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[info]}", markup=False), TimeElapsedColumn(), TextColumn("left"),
                TimeRemainingColumn(), console=Console(file=self.stream, force_terminal=True, highlight=False),
            )
            self._bars.start()
        return self._bars


class TrainingProgress:
    """The producers' progress hook (``producers.torch_trainer.Progress``: ``plan``, ``member``, ``epochs``,
    ``epoch_done``, ``predicting``, ``close``) drawn by a :class:`ProgressDisplay`: a members task; per training
    run an epochs task whose info is the epoch's mean training loss and accuracy (on the minibatches as trained);
    per member a predicting task (splits predicted, a line at most every :attr:`PREDICT_EVERY` seconds off a
    terminal). Once the run is planned (``plan``: the epochs and split predictions left), every epoch and
    prediction line also carries the time left of the whole run: the epochs left times the mean epoch so far plus
    the predictions left times the mean prediction so far ("then prediction" until one is measured)."""

    #: Seconds between plain lines of a member's prediction (a line per split of 41 would flood a log).
    PREDICT_EVERY = 20.0

    def __init__(self, display: ProgressDisplay):
        self.display = display
        self.member_index, self.members_total, self.label = 0, None, ""
        self.epochs_left: int | None = None
        self.predictions_left: int | None = None
        self._seconds = {"epoch": 0.0, "prediction": 0.0}
        self._seen = {"epoch": 0, "prediction": 0}
        self._last = display.clock()

    def plan(self, epochs: int, predictions: int) -> None:
        """The run still has ``epochs`` training epochs and ``predictions`` split predictions (a member on one
        split) to do."""
        self.epochs_left, self.predictions_left = int(epochs), int(predictions)

    def run_left(self) -> str:
        """``run ~m:ss left`` (the whole run), ``run: ~m:ss of training left, then prediction``, or ``""`` before
        the run is planned or its first epoch is measured."""
        if self.epochs_left is None:
            return ""
        per = {k: self._seconds[k] / self._seen[k] for k in self._seconds if self._seen[k]}
        train = self.epochs_left * per["epoch"] if self.epochs_left else 0.0
        if self.epochs_left and "epoch" not in per:
            return ""
        if self.predictions_left and "prediction" not in per:
            return f"run: ~{format_seconds(train)} of training left, then prediction"
        return f"run ~{format_seconds(train + self.predictions_left * per.get('prediction', 0.0))} left"

    def _measure(self, kind: str) -> None:
        now = self.display.clock()
        self._seconds[kind] += now - self._last
        self._seen[kind] += 1
        self._last = now
        left = "epochs_left" if kind == "epoch" else "predictions_left"
        if getattr(self, left) is not None:
            setattr(self, left, max(0, getattr(self, left) - 1))

    def _info(self, info: str) -> str:
        left = self.run_left()
        return f"{info}; {left}" if info and left else info or left

    def member(self, index: int, total: int, label: str) -> None:
        if "members" not in self.display.tasks:
            self.display.start("members", f"{label} members", total, done=index, each=True)
        elif index != self.display.tasks["members"].done:
            self.display.update("members", index, info=self.run_left())
        self.member_index, self.members_total, self.label = index, total, label

    def epochs(self, total: int, done: int, label: str) -> None:
        # members done when the run starts: a deep ensemble trains one run per member, a trajectory method (SWAG,
        # SG-MCMC) takes all its members from one run, so "member k of M" would misname the latter's epochs
        where = f" ({self.member_index}/{self.members_total} members done)" if self.members_total else ""
        self.display.start("epochs", f"{label} epochs{where}", total, done=done, each=True)
        self._last = self.display.clock()

    def epoch_done(self, epoch: int, loss: float, accuracy: float | None = None) -> None:
        self._measure("epoch")
        info = f"loss {loss:.4f}" + ("" if accuracy is None else f" acc {accuracy:.4f}")
        self.display.update("epochs", epoch, info=self._info(info))

    def predicting(self, done: int, total: int) -> None:
        """``done`` of the current member's ``total`` splits are predicted (``done = 0``: its prediction starts)."""
        if done == 0:
            self.display.start("predict", f"{self.label} predicting member {self.member_index + 1}: splits", total,
                               each=True, every=self.PREDICT_EVERY)
            self._last = self.display.clock()
            return
        self._measure("prediction")
        self.display.update("predict", done, info=self.run_left())

    def close(self) -> None:
        if "members" in self.display.tasks:
            task = self.display.tasks["members"]
            if task.done < task.total:
                self.display.update("members", task.total)
        self.display.close()
