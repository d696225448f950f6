# SPDX-License-Identifier: MIT
"""Log a ubench report to MLflow: the headline metrics (the report's ``summary``), the archive's identity as
parameters, the report JSON and the HTML report as artifacts (``ubench score --mlflow``; extra ``mlflow``)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["log_report", "headline_metrics", "MlflowLogError"]


class MlflowLogError(Exception):
    """MLflow is missing or refused the store / run (the message says which)."""


def headline_metrics(report: dict[str, Any]) -> dict[str, float]:
    """The finite numeric entries of ``report["summary"]`` (REPORT_KEYS.md); ``null`` ones are left out."""
    out = {}
    for key, value in report.get("summary", {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)
    return out


def log_report(report: dict[str, Any], *, tracking_uri: str | None = None, html_path: str | Path | None = None,
               experiment: str = "ubench", run_name: str | None = None) -> str:
    """Log ``report`` as one MLflow run and return its run id.

    ``tracking_uri`` e.g. ``file:/path/mlruns`` (a local file store, which MLflow 3 allows only with
    ``MLFLOW_ALLOW_FILE_STORE=true``: set here, since the caller named the directory) or ``sqlite:///mlflow.db``;
    None uses MLflow's default. The run gets
    params ``method``, ``model``, ``dataset``, ``n_members``, ``archive_sha256``, ``protocol``; metrics
    :func:`headline_metrics`; artifacts ``ubench_report.json`` and, when given, the HTML report.
    """
    from ..extras import require

    require("mlflow", what="log_report")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient
    local = tracking_uri is not None and (tracking_uri.startswith("file:") or "://" not in tracking_uri)
    saved = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    try:
        if local and saved is None:
            # the caller named a local directory: MLflow 3 keeps its file store but refuses it without this
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        return _log(MlflowClient(tracking_uri=tracking_uri), report, html_path, experiment, run_name)
    except (MlflowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MlflowLogError(f"MLflow ({tracking_uri or 'default store'}): {first}") from exc
    finally:
        if local and saved is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


def _log(client, report, html_path, experiment, run_name) -> str:
    """One run of ``report`` through ``client``; a failure marks the run FAILED."""
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(experiment)
    arch = report.get("archive", {})
    run = client.create_run(exp_id, run_name=run_name or f"{arch.get('method', '')}-{arch.get('dataset', '')}")
    run_id = run.info.run_id
    try:
        params = {"method": arch.get("method"), "model": arch.get("model"), "dataset": arch.get("dataset"),
                  "n_members": arch.get("n_members"), "archive_sha256": arch.get("sha256"),
                  "protocol": json.dumps(report.get("protocol", {}), sort_keys=True)[:6000]}
        for key, value in params.items():
            if value is not None:
                client.log_param(run_id, key, str(value))
        for key, value in headline_metrics(report).items():
            client.log_metric(run_id, key, value)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "ubench_report.json"
            path.write_text(json.dumps(report, sort_keys=True, indent=1, default=str))
            client.log_artifact(run_id, str(path))
        if html_path is not None:
            client.log_artifact(run_id, str(html_path))
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return run_id
