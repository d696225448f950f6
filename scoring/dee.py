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

__all__ = ["DEE_REFERENCE_SETTINGS", "DEE_CLL_SOURCES", "DeeUnavailableError", "reference_curve", "dee_of_report",
           "dee_between", "attach_dee", "below_one_note"]

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


#: Where :func:`dee_of_report` took its CLL from, best first: the method's own member curves at M, the same point
#: computed alone (``Protocol.dee_point``), or the report's single-seed CLL (not averaged over the halvings the
#: reference curve averages, so a deep ensemble can read a little under K against its own curve).
DEE_CLL_SOURCES = ("member_curves", "dee_point", "cll")


def _dee_cll(sec: Mapping[str, Any]) -> tuple[float, str]:
    mc = sec.get("member_curves")
    if mc:
        return float(mc["metrics"]["cll"]["mean"][-1]), "member_curves"
    cal = sec.get("calibrated")
    if not cal:
        raise DeeUnavailableError("the report has no calibrated CLL (DEE needs temperature scaling)")
    if cal.get("dee_cll") is not None:
        return float(cal["dee_cll"]), "dee_point"
    return float(cal["cll"]), "cll"


def dee_of_report(report: Mapping[str, Any], ensemble_report: Mapping[str, Any]) -> dict[str, Any]:
    """DEE (with bounds and the beyond- and below-reference flags; a value below one member is ``None``) of a
    report's full ensemble, read off the reference curve at
    the CLL averaged as the curve averages it (``cll_source``: one of :data:`DEE_CLL_SOURCES`), so that
    ``compare``, ``leaderboard`` and ``ubench dee`` give one number and a deep ensemble has DEE = K on its own curve.
    """
    _check_same_task(report, ensemble_report)
    cll, source = _dee_cll(_primary(report, "report"))
    mean, std = reference_curve(ensemble_report)
    # The dee_point mean sums the same fold CLLs as the curve's point in another order: equal up to rounding, so a
    # value within 1e-12 (relative) of a curve point is read as that point (a deep ensemble's DEE is K, not K - 2e-13).
    for level in mean:
        if abs(cll - level) <= 1e-12 * max(1.0, abs(level)):
            cll = float(level)
            break
    return {"cll": cll, "cll_source": source, **_below_as_null(dee_score(cll, mean, std).to_dict())}


def _below_as_null(d: dict[str, Any]) -> dict[str, Any]:
    """A DEE (or bound) below one member is ``None`` in a report, never the metric's floor of 1, which would read
    "as good as one member"; the ``below_reference`` flags say why it is ``None``."""
    for value, flag in (("dee", "below_reference"), ("lower", "lower_below"), ("upper", "upper_below")):
        if d[flag]:
            d[value] = None
    return d


def below_one_note(cll: float, reference_cll_mean: list[float], what: str = "its CLL") -> str:
    """The note of a report whose DEE is below one deep-ensemble member."""
    return (f"DEE below 1: {what} ({cll:.4f}) is below the CLL of one deep-ensemble member "
            f"({reference_cll_mean[0]:.4f}); reported as null ('< 1'), not as 1")


def dee_between(method_report: Mapping[str, Any], ensemble_report: Mapping[str, Any]) -> dict[str, Any]:
    """The DEE curve of a method (its CLL with k = 1..M members) against a deep ensemble: the ``ubench dee``
    result, with both archives, the protocol and the reference curve."""
    notes = _check_same_task(method_report, ensemble_report)
    mean, std = reference_curve(ensemble_report)
    sec = _primary(method_report, "method report")
    mc = sec.get("member_curves")
    if mc:
        k, cll = mc["n_members"], mc["metrics"]["cll"]["mean"]
    else:
        k, cll = [method_report["archive"]["n_members"]], [_dee_cll(sec)[0]]
    curve = dee_curve(cll, mean, std).to_dict()
    points = []
    for i in range(len(k)):
        d = _below_as_null({key: curve[key][i] for key in curve})
        points.append({"n_members": int(k[i]), "cll": float(cll[i]), "dee": d["dee"], "dee_lower": d["lower"],
                       "dee_upper": d["upper"], "beyond_reference": d["beyond_reference"],
                       "below_reference": d["below_reference"]})
    if any(p["beyond_reference"] for p in points):
        notes.append(f"some points lie beyond the reference's largest ensemble ({len(mean)} members): their DEE "
                     f"reads 'at least {len(mean)}'")
    below = [p["n_members"] for p in points if p["below_reference"]]
    if below:
        notes.append(below_one_note(points[-1]["cll"], mean, f"the CLL with {points[-1]['n_members']} member(s)")
                     if below == [points[-1]["n_members"]] else
                     f"DEE below 1 at {len(below)} point(s) (members {', '.join(map(str, below[:10]))}"
                     f"{', …' if len(below) > 10 else ''}): their CLL is below one deep-ensemble member's "
                     f"({mean[0]:.4f}); reported as null ('< 1'), not as 1")
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
    note when unavailable, or when below one member), ``summary.dee_below_one`` (whether the CLL is below one
    deep-ensemble member's: the DEE reads "< 1") and, with ``curve``, the whole ``dee`` section of
    :func:`dee_between` (``ubench score --ensemble``); ``ubench compare --ensemble`` asks for the number only."""
    try:
        if curve:
            report["dee"] = dee_between(report, ensemble_report)
            last = report["dee"]["curve"][-1]
            report["summary"]["dee"] = report["dee"]["dee"]
            report["summary"]["dee_below_one"] = last["below_reference"]
            if last["below_reference"]:
                report["notes"].append(below_one_note(last["cll"], report["dee"]["reference_curve"]["cll_mean"]))
        else:
            d = dee_of_report(report, ensemble_report)
            report["summary"]["dee"] = d["dee"]
            report["summary"]["dee_below_one"] = d["below_reference"]
            if d["below_reference"]:
                report["notes"].append(below_one_note(d["cll"], reference_curve(ensemble_report)[0]))
            if d["cll_source"] == "cll":
                report["notes"].append("DEE read at the single-seed CLL, not averaged over the reference curve's "
                                       "halvings (score with the protocol's dee_point or member curves on)")
    except DeeUnavailableError as exc:
        report["summary"]["dee"] = None
        report["summary"]["dee_below_one"] = None
        report["notes"].append(f"no DEE: {exc}")
    report["comparability"] = comparability(report["summary"])
