# SPDX-License-Identifier: MIT
"""The papers' figures as matplotlib figures, from a score report or from arrays (issue #28 item 12).

Each function takes a report (``score_archive``, ``score_arrays``, ``ubench score --json``) or the predictions
themselves (``(M, N, C)`` member probabilities, or one model's ``(N, C)``; ``kind="logits"`` for logits) with their
``labels``, which are scored first with :func:`~ubench.scoring.score.score_arrays`; and returns a
``matplotlib.figure.Figure``, drawn by the code that draws ``ubench score --html`` (``scoring/plots.py``) with
its protocol line in the title. Nothing is shown or saved: ``fig.savefig("reliability.pdf")``, or let a notebook
display it.

    >>> import ubench.plots
    >>> fig = ubench.plots.reliability_diagram(member_probs, labels)        # doctest: +SKIP
    >>> fig = ubench.plots.dee(method_report, ensemble_report)              # doctest: +SKIP

For a whole HTML report from arrays: ``ubench.write_html(ubench.score_arrays(member_probs, labels), "r.html")``.
matplotlib's backend is the caller's (nothing here switches it); text is drawn as plain text (no mathtext).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numpy.typing import ArrayLike

__all__ = ["reliability_diagram", "member_curves", "rejection_curves", "ood_roc", "dee"]


def _report(source: Mapping[str, Any] | ArrayLike, labels: ArrayLike | None, *, ood=None, kind: str = "probs",
            protocol="pitfalls", member_curves: bool = False) -> Mapping[str, Any]:
    """``source`` when it is a report, else the report of ``score_arrays`` on it (with member curves if asked)."""
    if isinstance(source, Mapping):
        if "in_domain" not in source:
            raise ValueError("expected a score report (a dict with 'in_domain') or an array of predictions")
        return source
    from .scoring.protocols import Protocol
    from .scoring.score import score_arrays

    if labels is None:
        raise ValueError("labels are needed to score predictions given as arrays")
    p = Protocol.preset(protocol) if isinstance(protocol, str) else protocol
    if member_curves:
        p = p.replace(member_curves=True)
    return score_arrays(source, labels, ood=ood, kind=kind, protocol=p)


def _section(report: Mapping[str, Any], split: str | None, what: str) -> tuple[str, Mapping[str, Any]]:
    name = split if split is not None else report.get("primary_split")
    if name is None or name not in report["in_domain"]:
        raise ValueError(f"no labelled in-domain split {name!r} in the report to draw {what} from; in-domain "
                         f"splits: {sorted(report['in_domain'])}")
    return name, report["in_domain"][name]


def _draw(draw):
    import matplotlib.pyplot as plt

    from .scoring.plots import _plain_text

    with _plain_text():
        return draw(plt)


def reliability_diagram(source: Mapping[str, Any] | ArrayLike, labels: ArrayLike | None = None, *,
                        split: str | None = None, kind: str = "probs", protocol="pitfalls"):
    """Reliability diagrams of an in-domain split: accuracy per confidence bin (with each bin's sample count and
    the ECE) before and, when the protocol calibrates, after test-time cross-validated temperature scaling, and
    the uncertainty (UCE) diagram (Guo et al. 2017; Laves et al. 2019).

    Parameters
    ----------
    source : a score report, or predictions: (n_members, n_samples, n_classes) or (n_samples, n_classes)
    labels : (n_samples,) integers, when ``source`` is predictions
    split : the in-domain split (default: the report's primary split)
    kind : ``"probs"`` or ``"logits"``, what the arrays hold
    protocol : a preset name or a ``Protocol`` (its ``bins`` are the diagram's), when ``source`` is predictions

    Returns
    -------
    matplotlib.figure.Figure
    """
    from .scoring.plots import _reliability

    report = _report(source, labels, kind=kind, protocol=protocol)
    name, sec = _section(report, split, "a reliability diagram")
    return _draw(lambda plt: _reliability(plt, name, sec, report["protocol"]["description"]))


def member_curves(source: Mapping[str, Any] | ArrayLike, labels: ArrayLike | None = None, *,
                  split: str | None = None, kind: str = "probs", protocol="pitfalls"):
    """CLL, accuracy and Brier score of the ensemble of the first k members against k, mean and one standard
    deviation over random member orders (Ashukha et al. 2020, Fig. 1's curves). A report must have been scored
    with member curves on (``Protocol.preset("pitfalls").replace(member_curves=True)``); arrays are scored so.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from .scoring.plots import _member_curve

    report = _report(source, labels, kind=kind, protocol=protocol, member_curves=True)
    name, sec = _section(report, split, "member curves")
    if not sec.get("member_curves"):
        raise ValueError(f"split {name!r} has no member curves: score it with member_curves on "
                         "(Protocol.replace(member_curves=True)); a one-member ensemble has none")
    return _draw(lambda plt: _member_curve(plt, name, sec["member_curves"], report["protocol"]["description"]))


def rejection_curves(source: Mapping[str, Any] | ArrayLike, labels: ArrayLike | None = None, *,
                     split: str | None = None, kind: str = "probs", protocol="pitfalls"):
    """Accuracy of the samples kept against the fraction rejected, most uncertain first, one line per uncertainty
    score, with the oracle and random baselines (Filos et al. 2019).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from .scoring.plots import _rejection

    report = _report(source, labels, kind=kind, protocol=protocol)
    name, sec = _section(report, split, "rejection curves")
    return _draw(lambda plt: _rejection(plt, name, sec["rejection_curves"], report["protocol"]["description"]))


def ood_roc(source: Mapping[str, Any] | ArrayLike, labels: ArrayLike | None = None, *, ood=None,
            kind: str = "probs", protocol="pitfalls"):
    """ROC curves of out-of-distribution detection (positive = OOD) against the primary in-domain split: one panel
    per uncertainty score (total, knowledge, confidence), one line per OOD split.

    Parameters
    ----------
    ood : with predictions as ``source``: the OOD predictions, one array or a mapping of split name to arrays

    Returns
    -------
    matplotlib.figure.Figure
    """
    from .scoring.plots import _ood_roc

    report = _report(source, labels, ood=ood, kind=kind, protocol=protocol)
    if not any(sec.get("roc_curves") for sec in report["ood"].values()):
        raise ValueError("the report has no OOD split to draw ROC curves of (give ood= with arrays)")
    return _draw(lambda plt: _ood_roc(plt, report["ood"], report["protocol"]["description"]))


def dee(method: Mapping[str, Any] | ArrayLike, ensemble: Mapping[str, Any] | ArrayLike | None = None,
        labels: ArrayLike | None = None, *, kind: str = "probs", protocol="pitfalls"):
    """The Deep Ensemble Equivalent of a method against its number of members, with its bounds and the reference
    deep ensemble's diagonal (Ashukha et al. 2020, Fig. 1); a point below one deep-ensemble member is a
    down-pointing triangle at 1 ("< 1").

    Parameters
    ----------
    method : the method's report, its predictions (with ``labels``), or a ``dee_between`` result (then no
        ``ensemble``)
    ensemble : the deep ensemble's report or predictions, (K, n_samples, n_classes)
    labels : (n_samples,) integers, when predictions are given

    Returns
    -------
    matplotlib.figure.Figure
    """
    from .scoring.dee import DEE_REFERENCE_SETTINGS, dee_between
    from .scoring.plots import _dee

    if isinstance(method, Mapping) and "curve" in method and "reference_curve" in method:
        result = method
    else:
        if ensemble is None:
            raise ValueError("give the deep ensemble (its report or predictions) as ensemble=")
        m = _report(method, labels, kind=kind, protocol=protocol, member_curves=True)
        p = protocol if not isinstance(protocol, str) else None
        if isinstance(ensemble, Mapping):
            e = _report(ensemble, labels)
        else:
            from .scoring.protocols import Protocol

            base = p if p is not None else Protocol.preset(protocol)
            e = _report(ensemble, labels, kind=kind, protocol=base.replace(**DEE_REFERENCE_SETTINGS))
        result = dee_between(m, e)
    return _draw(lambda plt: _dee(plt, result, result["protocol"]["description"]))
