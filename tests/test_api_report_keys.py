# SPDX-License-Identifier: MIT
"""Every key of a real ``score``/``compare``/``dee`` JSON is documented in scoring/REPORT_KEYS.md (issue #10 item 9).

The oracle is the document itself, read line by line: a key counts as documented where a line names it (in
backticks; ``a_{b,c}`` alternatives expanded, dotted paths split into parts, ``*`` a wildcard) together with its
parent key, on the line or in the section heading (``calibrated`` lists ``cll``; the In-domain section lists
``accuracy``). Top-level keys must be in their own table: "Top level" for a score report, the ``compare --json``
and ``dee --json`` sections for those. The outputs come from the CLI on generated archives with every kind of
split, a reference label file and a deep ensemble, so that every section appears.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "scoring"))
from scoring_archives import build_archive  # noqa: E402

from ubench.cli import cli  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "scoring" / "REPORT_KEYS.md"

#: Dicts whose keys are names from the data (split names, shift kinds, intensities, score names), not report
#: keys: their keys are skipped, their values still walked.
NAMED_CHILDREN = {
    ("archive", "splits"), ("in_domain",), ("ood",), ("shift",), ("shift_summary", "by_kind"),
    ("shift_summary", "groups", "by_intensity"), ("in_domain", "*", "rejection_curves"), ("ood", "*", "histograms"), ("ood", "*", "roc_curves"),
    ("method_scores",), ("in_domain", "*", "method_scores"), ("ood", "*", "method_scores"),
    ("intervals", "summary"), ("intervals", "splits"), ("intervals", "splits", "*"), ("samples", "splits"),
    ("samples", "splits", "*", "columns"), ("groups", "*", "summary"), ("best",), ("tied",),
}
#: Values that are free-form by design (documented as a whole), by the end of their path: not walked.
OPAQUE = {("archive", "diagnostics"), ("protocol", "cost_matrix")}


def _expand(token: str) -> list[str]:
    parts = re.split(r"\{([^{}]*)\}", token)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c).strip() for c in itertools.product(*choices)]


def documented_names(text: str) -> set[str]:
    names = set()
    for token in re.findall(r"`([^`]+)`", text):
        for name in _expand(token):
            names.update(p for p in re.split(r"[.\s/\[\]]+", name) if p and not p.startswith("<"))
    return names


def _names_key(key: str, names: set[str]) -> bool:
    return key in names or any("*" in n and fnmatch.fnmatchcase(key, n) for n in names)


class Doc:
    """The document as (heading, names of the heading, names of the line) per line."""

    def __init__(self, text: str):
        self.lines = []
        heading, heading_names = "", set()
        for line in text.splitlines():
            if line.startswith("#"):
                heading, heading_names = line, documented_names(line)
                continue
            self.lines.append((heading, heading_names, documented_names(line)))

    def documents(self, key: str, parent: str | None, root: str) -> bool:
        for heading, heading_names, names in self.lines:
            if not _names_key(key, names):
                continue
            if parent is None and root in heading:
                return True
            if parent is not None and (parent in names or parent in heading_names):
                return True
        return False


def undocumented(obj, doc: Doc, root: str, path: tuple[str, ...] = ()) -> set[str]:
    """Dotted paths of the keys of ``obj`` that ``doc`` does not document (data names shown as ``*``); ``root``
    names the heading of the table of top-level keys."""
    found: set[str] = set()
    if path[-2:] in OPAQUE:
        return found
    if isinstance(obj, dict):
        named = path in NAMED_CHILDREN
        parent = next((p for p in reversed(path) if p != "*"), None)
        for k, v in obj.items():
            if not named and not doc.documents(k, parent, root):
                found.add(".".join([*path, k]))
            found |= undocumented(v, doc, root, (*path, "*" if named else k))
    elif isinstance(obj, list):
        for v in obj:
            found |= undocumented(v, doc, root, path)
    return found


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("keys")
    method, _ = build_archive(tmp / "method.h5", m=3, n=80, logits=True, scores={"variance": "uncertainty"})
    from ubench.edge.record import record_latency  # /scalability latency (SPEC.md 5.2): the report's archive.latency

    record_latency(method, {"backend": "onnxruntime", "precision": "fp32", "sampling": "none", "threads": 1,
                            "n_members": 3, "model_bytes": 1000, "peak_rss_bytes": 10**8, "call_overhead_us": 7.0,
                            "device_peak_bytes": 10**6,
                            "batches": [{"batch_size": 1, "p50_ms": 0.1, "p95_ms": 0.2, "mean_ms": 0.12,
                                         "throughput_per_s": 8000.0}],
                            "fused": {"batches": [{"batch_size": 1, "p50_ms": 0.05}]}})
    ensemble, _ = build_archive(tmp / "de.h5", m=4, n=80, seed=0)
    runner = CliRunner()
    ref = tmp / "ref.h5"
    assert runner.invoke(cli, ["reference", str(ensemble), "--out", str(ref)]).exit_code == 0
    common = ["--ensemble", str(ensemble), "--reference", str(ref), "--no-sandbox", "--json"]
    out = {}
    for name, args in (("score", ["score", str(method), *common]),
                       ("compare", ["compare", str(method), str(ensemble), *common]),
                       ("dee", ["dee", str(method), *common])):
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, res.output
        out[name] = json.loads(res.stdout)
    assert out["score"]["archive"]["latency"]["latency_fused_p50_ms"] == 0.05  # walked below
    return out


def test_every_key_of_a_score_report_is_documented(outputs):
    report = outputs["score"]
    assert {"dee", "summary", "in_domain", "ood", "shift", "method_scores"} <= set(report)
    assert set(report["method_scores"]) == {"variance", "energy", "max_logit"}  # walked below
    assert "member_curves" in report["protocol"] and "member_curves" in report["in_domain"]["test"]
    assert undocumented(report, Doc(DOC.read_text(encoding="utf-8")), "Top level") == set()


def test_every_key_of_compare_and_dee_json_is_documented(outputs):
    doc = Doc(DOC.read_text(encoding="utf-8"))
    compare = outputs["compare"]
    assert compare["ensemble"] is not None
    assert undocumented({k: v for k, v in compare.items() if k != "reports"}, doc, "compare --json") == set()
    for report in compare["reports"]:  # each one a score report
        assert undocumented(report, doc, "Top level") == set()
    assert undocumented(outputs["dee"], doc, "dee --json") == set()


def test_the_checker_finds_an_undocumented_key():
    """The walk reports a key the document does not name beside its parent (and accepts the expanded and
    wildcard forms, and the section heading as the parent)."""
    doc = Doc("## Top level\n| `a_{x,y}` | `decision_cost*` |\n| `in_domain` | x |\n"
              "## In-domain (`in_domain.<split>`)\n| `c` | |\n| `cal` | `q` |\n## Other\n| `nope` | `zz` |\n")
    report = {"a_x": 1, "decision_cost_sum": 2, "in_domain": {"test": {"c": 1, "zz": 2, "cal": {"q": 1, "r": 2}}},
              "nope": 3}
    assert undocumented(report, doc, "Top level") == {"in_domain.*.zz", "in_domain.*.cal.r", "nope"}
