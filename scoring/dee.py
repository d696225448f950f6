# SPDX-License-Identifier: MIT
"""Deep Ensemble Equivalent from score reports (``ubench dee``, ``compare --ensemble``, leaderboards).

A report scored with ``Protocol(member_curves=True)`` carries, for its main in-domain split, the CLL of the
ensemble of its first k members averaged over random member orders. For a deep ensemble that curve (mean and
spread) is the DEE reference (Ashukha et al. 2020, Sec. 3.1); a method's CLL, or its whole curve, is then read off
it by ``ubench.metrics.dee``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..metrics.dee import dee_curve, dee_score
from ..metrics.report import comparability

__all__ = ["DEE_REFERENCE_SETTINGS", "DeeUnavailableError", "reference_curve", "dee_of_report", "dee_between",
           "attach_dee"]

#: Protocol settings a deep ensemble is scored under to serve as DEE reference (``Protocol.replace(**…)``): its
#: member curves, with the temperature fitted after averaging as in the Pitfalls paper.
DEE_REFERENCE_SETTINGS = {"member_curves": True, "placement": "post"}


class DeeUnavailableError(ValueError):
    """A report lacks what DEE needs (a labelled in-domain split, member curves, a CLL)."""


def _primary(report: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    primary = report.get("primary_split")
    if primary is None or primary not in report.get("in_domain", {}):
        raise DeeUnavailableError(f"the {what} has no labelled in-domain split to compute CLL on")
    return report["in_domain"][primary]


def reference_curve(ensemble_report: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """``(CLL_mean(k), CLL_std(k))``, k = 1..K, of a deep-ensemble report scored with member curves."""
    sec = _primary(ensemble_report, "deep-ensemble report")
    mc = sec.get("member_curves")
    if not mc:
        raise DeeUnavailableError("the deep-ensemble report has no member curves (score it with member curves on; "
                                  "a one-member archive has none)")
    if mc.get("placement") != "post":
        raise DeeUnavailableError("a DEE reference needs member curves with temperature scaling after averaging "
                                  f"(placement 'post'); found {mc.get('placement')!r}")
    return mc["metrics"]["cll"]["mean"], mc["metrics"]["cll"]["std"]


def _check_same_task(method: Mapping[str, Any], ensemble: Mapping[str, Any]) -> list[str]:
    m, e = method["archive"], ensemble["archive"]
    ms, es = method["primary_split"], ensemble["primary_split"]
    problems = []
    if m["n_classes"] != e["n_classes"]:
        problems.append(f"{m['n_classes']} classes against the ensemble's {e['n_classes']}")
    if ms != es:
        problems.append(f"in-domain split {ms!r} against the ensemble's {es!r}")
    elif m["splits"][ms]["n_samples"] != e["splits"][es]["n_samples"]:
        problems.append(f"{m['splits'][ms]['n_samples']} in-domain samples against the ensemble's "
                        f"{e['splits'][es]['n_samples']}")
    if problems:
        raise DeeUnavailableError("the method and the deep ensemble are not scored on the same task: "
                                  + "; ".join(problems))
    notes = []
    if method["labels"]["source"] != "reference" or ensemble["labels"]["source"] != "reference":
        notes.append("labels came from the archives themselves: pass --reference to make sure both were scored "
                     "on the same samples and labels")
    return notes


def dee_of_report(report: Mapping[str, Any], ensemble_report: Mapping[str, Any]) -> dict[str, Any]:
    """DEE (with bounds and the beyond-reference flag) of a report's calibrated CLL."""
    _check_same_task(report, ensemble_report)
    cal = _primary(report, "report").get("calibrated")
    if not cal:
        raise DeeUnavailableError("the report has no calibrated CLL (DEE needs temperature scaling)")
    mean, std = reference_curve(ensemble_report)
    return {"cll": cal["cll"], **dee_score(cal["cll"], mean, std).to_dict()}


def dee_between(method_report: Mapping[str, Any], ensemble_report: Mapping[str, Any]) -> dict[str, Any]:
    """The DEE curve of a method (its CLL with k = 1..M members) against a deep ensemble: the ``ubench dee``
    result, with both archives, the protocol and the reference curve."""
    notes = _check_same_task(method_report, ensemble_report)
    mean, std = reference_curve(ensemble_report)
    sec = _primary(method_report, "method report")
    mc = sec.get("member_curves")
    if mc:
        k, cll = mc["n_members"], mc["metrics"]["cll"]["mean"]
    elif sec.get("calibrated"):
        k, cll = [method_report["archive"]["n_members"]], [sec["calibrated"]["cll"]]
    else:
        raise DeeUnavailableError("the method report has no calibrated CLL (DEE needs temperature scaling)")
    curve = dee_curve(cll, mean, std).to_dict()
    points = [{"n_members": int(k[i]), "cll": float(cll[i]), "dee": curve["dee"][i], "dee_lower": curve["lower"][i],
               "dee_upper": curve["upper"][i], "beyond_reference": curve["beyond_reference"][i]}
              for i in range(len(k))]
    if any(p["beyond_reference"] for p in points):
        notes.append(f"some points lie beyond the reference's largest ensemble ({len(mean)} members): their DEE "
                     f"reads 'at least {len(mean)}'")
    return {
        "method": {k2: method_report["archive"][k2] for k2 in ("path", "sha256", "method", "n_members")},
        "ensemble": {k2: ensemble_report["archive"][k2] for k2 in ("path", "sha256", "method", "n_members")},
        "protocol": method_report["protocol"],
        "reference_curve": {"n_members": list(range(1, len(mean) + 1)), "cll_mean": mean, "cll_std": std},
        "curve": points,
        "dee": points[-1]["dee"],
        "notes": notes,
    }


def attach_dee(report: dict[str, Any], ensemble_report: Mapping[str, Any], *, curve: bool = True) -> None:
    """Add the DEE against a deep-ensemble report to a finished report, in place: ``summary.dee`` (``None`` with a
    note when unavailable) and, with ``curve``, the whole ``dee`` section of :func:`dee_between` (``ubench score
    --ensemble``); ``ubench compare --ensemble`` asks for the number only."""
    try:
        if curve:
            report["dee"] = dee_between(report, ensemble_report)
            report["summary"]["dee"] = report["dee"]["dee"]
        else:
            report["summary"]["dee"] = dee_of_report(report, ensemble_report)["dee"]
    except DeeUnavailableError as exc:
        report["summary"]["dee"] = None
        report["notes"].append(f"no DEE: {exc}")
    report["comparability"] = comparability(report["summary"])
