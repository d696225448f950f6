# SPDX-License-Identifier: MIT
"""Scoring multiplies on one BLAS thread (``scoring/blas.py``): its own threads already fill the cores, and
OpenBLAS's threads busy-wait beside them. The caller's setting is back once the report is done."""

from __future__ import annotations

from threadpoolctl import threadpool_info, threadpool_limits

from scoring_archives import build_archive
from ubench.scoring.protocols import Protocol
from ubench.scoring.score import run_score


def _blas_threads() -> set[int]:
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_scoring_runs_blas_on_one_thread_and_restores_the_callers_setting(tmp_path):
    path, _ = build_archive(tmp_path / "a.h5", n=200)
    during = []
    with threadpool_limits(limits=2, user_api="blas"):
        assert _blas_threads() == {2}
        report = run_score(path, protocol=Protocol.preset("pitfalls").replace(bootstrap=50),
                           progress=lambda task, done, total: during.append(_blas_threads()))
        after = _blas_threads()
    assert report["intervals"]["splits"]
    assert during and all(t == {1} for t in during)
    assert after == {2}
