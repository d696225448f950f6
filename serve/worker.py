# SPDX-License-Identifier: MIT
"""The scoring loop: worker threads claim queued submissions from the database and score each stored archive in
the sandboxed scorer (``scoring.leaderboard.score_one``: size check, content hash, private copy, limited child
process, results cached by content and configuration), then store the outcome and, for a scored archive, its
HTML report (figures drawn in the limited plotting child). A rejected archive's file is deleted; its findings
stay in the database.

With ``scheduler`` (``ubench serve --scheduler ADDRESS``) each thread hands its archive to a worker of that Dask
cluster instead (``scoring.distributed.SchedulerClient``), which runs the same ``score_one``, sandbox included;
one thread per worker thread of the cluster at start. The cluster's workers must see ``--data-dir`` at the same
path (same machine or a shared filesystem).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..scoring.leaderboard import BoardConfig, score_one
from .db import Database
from .storage import upload_path

__all__ = ["Scorer"]

log = logging.getLogger("ubench.serve")


class Scorer:
    """``workers`` threads scoring the database's queue under ``config`` until :meth:`stop`."""

    def __init__(self, db: Database, data_dir: Path, config: BoardConfig, *, workers: int = 1,
                 poll_seconds: float = 0.5, reports: bool = True, scheduler: str | None = None):
        self.db, self.data_dir, self.config = db, data_dir, config
        self.workers, self.poll, self.reports = workers, poll_seconds, reports
        self.scheduler = scheduler
        self._client = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []

    def result_key(self, sha256: str) -> str:
        return f"{sha256}-{self.config.key()[:16]}"

    def start(self) -> None:
        n = self.db.requeue_interrupted()
        if n:
            log.warning("requeued %d submission(s) whose scoring was interrupted", n)
        if self.scheduler is not None:
            from ..scoring.distributed import SchedulerClient

            self._client = SchedulerClient(self.scheduler)
            self.workers = self._client.n_threads()
        for i in range(self.workers):
            t = threading.Thread(target=self._loop, name=f"ubench-scorer-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=5)
        if self._client is not None:
            self._client.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            sub = self.db.claim_next()
            if sub is None:
                self._wake.wait(self.poll)
                self._wake.clear()
                continue
            try:
                self.score(sub)
            except Exception:  # a ubench bug: the submission goes back to the queue's end, nothing is lost
                log.exception("scoring submission %s failed", sub["id"])
                self.db.requeue_interrupted()
                self._stop.wait(self.poll)

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
        self.db.finish(sub["id"], key, sub["sha256"], record, status)  # the row appears now
        if status == "rejected":
            upload_path(self.data_dir, sub["sha256"]).unlink(missing_ok=True)
        elif self.reports:  # then its page (figures drawn in the limited plotting child)
            self._write_report(key, record)

    def _write_report(self, key: str, record: dict) -> None:
        from ..scoring.html import write_html

        out = self.data_dir / "reports" / f"{key}.html"
        if out.exists():
            return
        try:
            write_html(record["outcome"]["report"], out, limits=self.config.sandbox)
        except Exception:  # the report page is a convenience; the result stands without it
            log.exception("could not draw the report of %s", key)
