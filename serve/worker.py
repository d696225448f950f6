# SPDX-License-Identifier: MIT
"""The scoring loop: worker threads claim queued submissions from the database and score each stored archive in
the sandboxed scorer (``scoring.leaderboard.score_one``: size check, content hash, private copy, limited child
process, results cached by content and configuration), then store the outcome and go on to the next claim; a
thread of its own draws each scored archive's HTML report (figures drawn in the limited plotting child), and at
start the pages that a stopped server left undrawn. A rejected archive's file is deleted; its findings stay in
the database.

With ``scheduler`` (``ubench serve --scheduler ADDRESS``) each thread hands its archive to a worker of that Dask
cluster instead (``scoring.distributed.SchedulerClient``), which runs the same ``score_one``, sandbox included;
one thread per worker thread of the cluster at start. The cluster's workers must see ``--data-dir`` at the same
path (same machine or a shared filesystem).

Claims carry a lease renewed by a heartbeat (``serve/db.py``): a worker's error path gives back its own claim only,
a claim is tried at most ``max_attempts`` times, and a finished archive's board row is stored with the outcome and
ranked by the board refresh (``serve/board.py``) in a thread of its own; another thread then computes the new
row's bootstrap replicates and the rank intervals across all rows, at once on a small board and at most every
``INTERVAL_DUTY`` times their cost on a large one (``board.IntervalSchedule``). Neither waits for the other: a
row is on the board (its rank interval marked as pending) while the replicates of a large board are computed.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid
from pathlib import Path

from ..scoring.leaderboard import BoardConfig, score_one
from .board import (INTERVAL_DUTY, IntervalSchedule, ReplicateCache, backfill_entries, board_entry, compute_intervals,
                    fill_statistics, refresh_board)
from .db import Database
from .storage import upload_path

__all__ = ["Scorer"]

log = logging.getLogger("ubench.serve")


class Scorer:
    """``workers`` threads scoring the database's queue under ``config`` until :meth:`stop`, a heartbeat thread
    that renews this server's leases every quarter of ``lease`` seconds and requeues claims whose lease expired
    (a stopped server's), a thread that refreshes the materialised board after each scored submission (one
    refresh for several that finish together), and a thread that computes the rows' replicates and the rank
    intervals when ``IntervalSchedule(interval_duty)`` allows, and a thread that draws the scored submissions'
    report pages: a scored row reaches the board without waiting for any of them (at start, the replicates of a
    10,000-row board take minutes), and a scoring thread claims the next upload without drawing a page."""

    def __init__(self, db: Database, data_dir: Path, config: BoardConfig, *, workers: int = 1,
                 poll_seconds: float = 0.5, reports: bool = True, scheduler: str | None = None, lease: float = 60.0,
                 max_attempts: int = 3, interval_duty: float = INTERVAL_DUTY):
        self.db, self.data_dir, self.config = db, data_dir, config
        self.workers, self.poll, self.reports = workers, poll_seconds, reports
        self.scheduler, self.lease, self.max_attempts = scheduler, lease, max_attempts
        #: This server's name on its claims: host, process and a random part (a restarted server is another one).
        self.owner = f"{socket.gethostname()[:32]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._client = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._dirty = threading.Event()  # scored rows wait for the board's refresh
        self._stats = threading.Event()  # refreshed rows wait for their replicates and the rank intervals
        self._held: set[str] = set()
        self._held_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._schedule = IntervalSchedule(interval_duty)
        self._replicates = ReplicateCache()
        self._pages: queue.Queue[tuple[str, dict | None]] = queue.Queue()  # (result key, record or None: read it)

    def result_key(self, sha256: str) -> str:
        return f"{sha256}-{self.config.key()[:16]}"

    def start(self) -> None:
        n = self.db.requeue_expired(max_attempts=self.max_attempts)
        if n:
            log.warning("took back %d claim(s) whose lease had expired (their server stopped)", n)
        if self.scheduler is not None:
            from ..scoring.distributed import SchedulerClient

            self._client = SchedulerClient(self.scheduler)
            self.workers = self._client.n_threads()
        targets = [(f"ubench-scorer-{i}", self._loop) for i in range(self.workers)]
        targets += [("ubench-heartbeat", self._heartbeat), ("ubench-board", self._refresher),
                    ("ubench-intervals", self._intervals)]
        if self.reports:
            targets.append(("ubench-pages", self._draw_pages))
        self._dirty.set()  # the board is brought up to date at start (entries of an older database included)
        self._stats.set()  # and every row's replicates, before the first rank intervals
        for name, target in targets:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._dirty.set()
        self._stats.set()
        for t in self._threads:
            t.join(timeout=5)
        if self._client is not None:
            self._client.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                sub = self.db.claim_next(self.owner, lease=self.lease)
            except Exception:  # the database went away for a moment: try again, lose nothing
                log.exception("could not claim a submission")
                self._stop.wait(self.poll)
                continue
            if sub is None:
                self._wake.wait(self.poll)
                self._wake.clear()
                continue
            with self._held_lock:
                self._held.add(sub["id"])
            try:
                self.score(sub)
            except Exception:  # a ubench or host bug: this claim (and no other) goes back, a bounded number of times
                log.exception("scoring submission %s failed (attempt %d of %d)", sub["id"], sub["attempts"],
                              self.max_attempts)
                try:
                    self.db.release(sub["id"], self.owner, max_attempts=self.max_attempts)
                except Exception:  # its lease expires and another heartbeat takes it back
                    log.exception("could not give back submission %s", sub["id"])
                self._stop.wait(self.poll)
            finally:
                with self._held_lock:
                    self._held.discard(sub["id"])

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease / 4):
            try:
                with self._held_lock:
                    held = sorted(self._held)
                lost = set(held) - self.db.renew_leases(self.owner, held, lease=self.lease)
                for sid in lost:  # finished meanwhile, or its lease ran out (this server stalled): finish() refuses
                    log.warning("no longer holds the claim on submission %s", sid)
                if self.db.requeue_expired(max_attempts=self.max_attempts):
                    self._wake.set()
            except Exception:
                log.exception("heartbeat failed")

    def _refresher(self) -> None:
        """Puts newly scored rows on the board: entries of an older database at start, then one refresh per wake
        (several scored submissions at once share one). Never computes statistics or intervals (``_intervals``)."""
        backfilled = False
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                if not backfilled:
                    n = backfill_entries(self.db)
                    backfilled = True
                    if n:
                        log.warning("added %d scored submission(s) to the materialised board", n)
                refresh_board(self.db, self.config)
                self._stats.set()
            except Exception:
                log.exception("could not refresh the board")
                self._stop.wait(self.poll)
                self._dirty.set()

    def _intervals(self) -> None:
        """Each board row's replicates (new rows', and at start every row's that has none: minutes at 10,000
        rows), then the rank intervals across all rows when ``IntervalSchedule`` allows. Its own thread: new rows
        reach the board (``_refresher``) meanwhile, their interval marked as pending."""
        owed = True  # the rank intervals lag the stored board (always at start)
        while not self._stop.is_set():
            changed = self._stats.wait(self._schedule.wait(time.monotonic()) if owed else None)
            if self._stop.is_set():
                return
            self._stats.clear()
            try:
                if changed:
                    fill_statistics(self.db, self.config, stop=self._stop)
                    owed = True
                now = time.monotonic()
                if owed and self._schedule.due(now):
                    info = compute_intervals(self.db, self.config, self._replicates)
                    self._schedule.done(now, info["seconds"])
                    owed = False
            except Exception:
                log.exception("could not compute the board's rank intervals")
                self._stop.wait(self.poll)
                self._stats.set()

    def score(self, sub: dict) -> None:
        key = self.result_key(sub["sha256"])
        known = self.db.result(key)
        if known is not None:  # the same bytes were scored before (a duplicate upload): one result for both
            record = known["record"]
        else:
            path = upload_path(self.data_dir, sub["sha256"])
            if self._client is not None:
                record = self._client.call(score_one, path, board=self.data_dir / "board", config=self.config)
            else:
                record = score_one(path, board=self.data_dir / "board", config=self.config)
            record = {k: v for k, v in record.items() if k != "archive"}
        status = "scored" if record["outcome"]["status"] == "ok" else "rejected"
        entry = board_entry(record) if status == "scored" else None
        if not self.db.finish(sub["id"], self.owner, key, sub["sha256"], record, status, entry):
            log.warning("lost the claim on submission %s while scoring it; its new claim finishes it", sub["id"])
            return
        if status == "rejected":
            upload_path(self.data_dir, sub["sha256"]).unlink(missing_ok=True)
            return
        self._dirty.set()  # the row appears with the next refresh, right away
        if self.reports:  # its page is drawn by the pages thread, while this one claims the next upload
            self._pages.put((key, record))

    def _draw_pages(self) -> None:
        """Draws report pages one at a time: at start, every scored submission's that has none (a stopped server's
        queue, or pages of an older version's database), then each newly scored one as :meth:`score` hands it on."""
        try:
            for key in self.db.scored_result_keys():
                if not (self.data_dir / "reports" / f"{key}.html").exists():
                    self._pages.put((key, None))
        except Exception:
            log.exception("could not list the report pages to draw")
        while not self._stop.is_set():
            try:
                key, record = self._pages.get(timeout=self.poll)
            except queue.Empty:
                continue
            try:
                if record is None:
                    found = self.db.result(key)
                    if found is None:
                        continue
                    record = found["record"]
                self._write_report(key, record)
            except Exception:  # the database went away for a moment: the page is drawn at the next start
                log.exception("could not draw the report of %s", key)

    def _write_report(self, key: str, record: dict) -> None:
        from ..scoring.html import write_html

        out = self.data_dir / "reports" / f"{key}.html"
        if out.exists():
            return
        try:
            report = {k: v for k, v in record["outcome"]["report"].items() if k != "samples"}  # never served
            write_html(report, out, limits=self.config.sandbox)
        except Exception:  # the report page is a convenience; the result stands without it
            log.exception("could not draw the report of %s", key)
