# SPDX-License-Identifier: MIT
r"""Bootstrap of the test-time cross-validated protocol (CLL, calibrated NLL/Brier/ECE/accuracy, temperature) with
the temperature refitted in every replicate, to first order.

A replicate reweights the test samples (counts ``w``) and keeps the halvings: every fold is refitted on its
reweighted half and scored on its reweighted other half. Refitting by Newton's method from the fold's fitted
inverse temperature :math:`\beta_f` moves it, to first order, by

.. math:: \delta_f(w) = -\frac{\sum_{i \in A_f} w_i\, (g_i - \bar g_f)}{H_f}, \qquad
          g_i = \frac{\partial\, \mathrm{nll}_i}{\partial \beta}, \quad H_f = \sum_{i \in A_f} h_i,
          \quad h_i = \frac{\partial^2 \mathrm{nll}_i}{\partial \beta^2}

(:math:`A_f` the fold's fit half; :math:`\sum_{A_f} g_i(\beta_f) = 0` at the fit, so :math:`\delta_f(1) = 0`), and a
held-out metric :math:`M_f(w) = \sum_{E_f} w_i m_i(\beta_f + \delta_f) / \sum_{E_f} w_i` by
:math:`\delta_f(w)\, \overline{m'}_f`. Expanding the ratio too, every protocol metric becomes, to first order, a
weighted mean :math:`M(w) = \frac1N \sum_i w_i \psi_i` of one per-sample column (its empirical influence plus
the value):

.. math:: \psi_i = M + \frac{N}{2R} \sum_f \Big[ \mathbb{1}[i \in E_f] \frac{m_i(\beta_f) - M_f}{|E_f|}
          - \mathbb{1}[i \in A_f] \frac{(g_i - \bar g_f)\, \overline{m'}_f}{H_f} \Big]

and the temperature :math:`\bar T = \frac{1}{2R}\sum_f 1/\beta_f` has
:math:`\psi^T_i = \bar T + \frac{N}{2R} \sum_{f: i \in A_f} (g_i - \bar g_f) / (H_f \beta_f^2)`. This is the
one-step (linearised) bootstrap of an M-estimator (Davison & Hinkley 1997, Sec. 2.7.4 and 3.3; Hu & Kalbfleisch
2000); the per-sample derivatives are evaluated once at the folds' mean :math:`\beta` (the folds' optima differ
by :math:`O(N^{-1/2})`, which changes the refit term only at second order) and centred within each fold. For
the CLL the refit term is itself of second order (the fit minimises the same NLL, so
:math:`\overline{\mathrm{nll}'}_f = O(N^{-1/2})`): holding the temperatures fixed would give nearly the same CLL
interval, but no interval at all for the temperature, and the calibrated Brier's derivative does not vanish.
``tests/metrics/test_interval_coverage.py`` shows the resulting intervals cover the population CLL, calibrated
Brier and temperature at the nominal rate, and ``tests/metrics/test_protocol_bootstrap.py`` compares them with
an exact refit of every fold in every replicate.

The calibrated ECE re-bins each held-out half, so it is not a mean: its replicate is
:math:`\frac{1}{2R}\sum_f \sum_k |S_{fk}(w) - \delta_f(w) C'_{fk}| / \sum_{E_f} w_i` with :math:`S_{fk}` the
weighted sum of ``hit - confidence`` over the fold's held-out samples in bin k (bins fixed by each sample's
held-out confidence) and :math:`C'_{fk}` the bin's confidence derivative (:class:`CVInfluence` keeps the
columns).

A fold whose optimum lay at a bound of the temperature interval is held at the bound (:math:`\delta_f = 0`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .bootstrap import Partition
from .calibration import _equal_width_bin_index
from .protocol import (
    _halving_perms,
    _heldout_betas,
    _label_values_blocked,
    _member_fit_half,
    _member_halves,
    _post_fold_fits,
    _post_heldout,
    _ts_problem,
)
from .temperature_solver import ShiftedLogs, _scaled_row_scores_multi, _softmax_scaled

__all__ = ["CVInfluence", "cv_influence", "PROTOCOL_KEYS"]

#: The protocol metrics with a per-sample influence column (the report's ``calibrated`` keys).
PROTOCOL_KEYS = ("cll", "calibrated_nll", "calibrated_brier", "calibrated_accuracy", "temperature")
_BLOCK = 1 << 16  # entries per row block of the derivative pass


@dataclass(frozen=True)
class CVInfluence:
    r"""Per-sample columns of the test-time CV protocol (see the module docstring).

    ``psi[key]`` (N,) for every key of :data:`PROTOCOL_KEYS`: the weighted mean ``w @ psi / N`` of a replicate is
    its value (all-ones weights: the protocol's own value). For the calibrated ECE: ``fold_columns`` (N, 2F), per
    fold f its refit coefficients (the replicate's :math:`\delta_f` is their weighted sum) and its held-out
    indicator; ``halvings`` one :class:`~ubench.metrics.bootstrap.Partition` per repeat, of the samples by
    (held-out half, bin of their held-out confidence), with ``gaps`` (``hit - confidence`` at the fold's
    temperature); ``slopes`` (F, n_bins) the bins' derivatives of ``hit - confidence`` in beta.
    :meth:`calibrated_ece` turns them into replicate values.
    """

    psi: dict[str, NDArray[np.float64]]
    fold_columns: NDArray[np.float64]
    halvings: tuple[tuple[Partition, NDArray[np.float64]], ...]
    slopes: NDArray[np.float64]
    n_bins: int

    def cell_entries(self) -> tuple[int, list[tuple[NDArray[np.intp], NDArray[np.float64]]]]:
        """The (N, R * 2 * n_bins) one-hot cell columns as their nonzeros (``bootstrap.OneHot``'s width and
        entries): repeat r's held-out gaps by (half, bin). ``weights @`` the columns gives the cell sums
        :meth:`calibrated_ece` takes as ``cell_sums``."""
        n = self.fold_columns.shape[0]
        k2 = 2 * self.n_bins
        entries = []
        for r, (part, gaps) in enumerate(self.halvings):
            cells = np.empty(n, dtype=np.intp)
            cells[part.order] = np.repeat(part.cells, np.diff(np.r_[part.starts, n]))
            entries.append((r * k2 + cells, gaps))
        return len(self.halvings) * k2, entries

    def calibrated_ece(self, weights: NDArray, fold_sums: NDArray, cell_sums: NDArray | None = None
                       ) -> NDArray[np.float64]:
        """Calibrated ECE of each replicate: ``weights`` (B, N), ``fold_sums = weights @ fold_columns`` and,
        when given, ``cell_sums`` = ``weights @`` the columns of :meth:`cell_entries` (else computed by partition)."""
        k = self.n_bins
        f = self.slopes.shape[0]
        delta, count = fold_sums[:, :f], fold_sums[:, f:]
        total = np.zeros(weights.shape[0])
        for r, (part, gaps) in enumerate(self.halvings):
            # (B, 2 k): the two folds of repeat r
            sums = part.sums(weights, gaps) if cell_sums is None else cell_sums[:, r * 2 * k:(r + 1) * 2 * k]
            for j in range(2):
                fold = 2 * r + j
                cell = sums[:, j * k:(j + 1) * k] + delta[:, fold:fold + 1] * self.slopes[fold]
                with np.errstate(invalid="ignore", divide="ignore"):  # an empty held-out half: undefined (NaN)
                    total += np.where(count[:, fold] > 0, np.abs(cell).sum(axis=1) / count[:, fold], np.nan)
        return total / f


def _row_stats(s: NDArray, s_y: NDArray, beta: float):
    """Per row at ``beta`` for q = softmax(beta s) (rows of ``s`` have max 0): mean and variance of s under q,
    sum q**2, sum q**2 s, q at the label and 1/Z = max q."""
    n, c = s.shape
    out = {k: np.empty(n) for k in ("mu", "var", "sq", "sqs", "z")}
    ones = np.ones(c)
    step = max(1, _BLOCK // c)
    for a in range(0, n, step):
        b = min(n, a + step)
        blk = s[a:b]
        e = np.exp(beta * blk)
        z = e @ ones
        es = e * blk
        m1 = (es @ ones) / z
        out["mu"][a:b] = m1
        out["var"][a:b] = np.maximum(np.einsum("ij,ij->i", es, blk) / z - m1 * m1, 0.0)
        out["sq"][a:b] = np.einsum("ij,ij->i", e, e) / (z * z)
        out["sqs"][a:b] = np.einsum("ij,ij->i", e, es) / (z * z)
        out["z"][a:b] = z
    q_y = np.exp(beta * s_y) / out["z"]
    return out, q_y


def _post_derivatives(s, s_y, beta):
    """(g, h, d nll, d brier, d conf) per row at ``beta`` (placement ``post``)."""
    st, q_y = _row_stats(s, s_y, beta)
    g = st["mu"] - s_y
    brier_d = 2.0 * (st["sqs"] - st["mu"] * st["sq"]) - 2.0 * q_y * (s_y - st["mu"])
    conf_d = -st["mu"] / st["z"]  # d/dbeta of max q = 1/Z (the row max of s is 0)
    return g, st["var"], g, brier_d, conf_d


def _member_derivatives(s, s_y, labels, beta):
    """(g, h, d nll, d brier, d conf) per row at ``beta`` for q = mean_m softmax(beta s_m) (``per_member``);
    ``s`` (M, N, C), ``s_y`` (M, N)."""
    m, n, c = s.shape
    idx = np.arange(n)
    q, dq = np.zeros((n, c)), np.zeros((n, c))
    q_y, dq_y, d2q_y = np.zeros(n), np.zeros(n), np.zeros(n)
    for j in range(m):
        p = _softmax_scaled(s[j], beta)
        ps = p * s[j]
        mu = ps.sum(axis=1)
        var = np.maximum(np.einsum("ij,ij->i", ps, s[j]) - mu * mu, 0.0)
        py = p[idx, labels]
        d = s_y[j] - mu
        q += p
        dq += ps - p * mu[:, None]  # d p / d beta = p (s - mu)
        q_y += py
        dq_y += py * d
        d2q_y += py * (d * d - var)
    q, dq, q_y, dq_y, d2q_y = q / m, dq / m, q_y / m, dq_y / m, d2q_y / m
    g = -dq_y / q_y
    h = -d2q_y / q_y + g * g
    brier_d = 2.0 * np.einsum("ij,ij->i", q, dq) - 2.0 * dq_y
    conf_d = dq[idx, np.argmax(q, axis=1)]
    return g, h, g, brier_d, conf_d


def _member_heldout(s, s_y, labels, rows, beta):
    """Per held-out row of ``per_member`` at ``beta``: (nll, conf, hit, brier) of q = mean_m softmax(beta s_m)."""
    from scipy import special

    m = s.shape[0]
    sub = s[:, rows]
    log_z = special.logsumexp(beta * sub, axis=2)
    nll = np.log(m) - special.logsumexp(beta * s_y[:, rows] - log_z, axis=0)
    q = _softmax_scaled(sub, beta).mean(axis=0)
    y = labels[rows]
    top = np.argmax(q, axis=1)
    idx = np.arange(rows.shape[0])
    brier = np.maximum(np.einsum("ij,ij->i", q, q) - 2.0 * q[idx, y] + 1.0, 0.0)
    return nll, q[idx, top], (top == y).astype(np.float64), brier


def cv_influence(member_probs: NDArray, labels: NDArray, *, placement: str = "post", n_repeats: int = 5,
                 seed: int = 0, eps: float = 1e-12, n_bins: int = 15,
                 bounds: tuple[float, float] = (0.01, 100.0)) -> CVInfluence:
    r"""Per-sample influence columns of :func:`ubench.metrics.cross_validated_calibration`'s metrics.

    Parameters
    ----------
    member_probs : ndarray (M, N, C), validated, rows on the simplex; for ``post`` any sequence whose first item is
        the ensemble mean (the protocol fits ``post`` on it; ``(mean,)`` as the report passes it, read in row blocks
        only, so it may be a split re-read from its archive)
    labels : ndarray (N,), integers in ``[0, C)``; N >= 2
    placement, n_repeats, seed, eps, n_bins, bounds : as :func:`~ubench.metrics.cross_validated_calibration`,
        whose halvings and fold fits this repeats exactly.

    Returns
    -------
    CVInfluence
        ``psi[key].mean()`` equals the protocol's value of ``key``; a replicate with counts ``w`` has value
        ``w @ psi[key] / N`` (first-order refit, module docstring).
    """
    n = labels.shape[0]
    perms = _halving_perms(n, n_repeats, np.random.default_rng(seed))
    half = n // 2
    folds = []  # (fit rows, eval rows)
    for perm in perms:
        folds += [(perm[:half], perm[half:]), (perm[half:], perm[:half])]
    # per fold: held-out (nll, conf, hit, brier) on its eval rows, its 1/T and whether it hit a bound
    heldout, betas, hits = [], [], []
    if placement == "post":
        mean = member_probs[0]
        s = ShiftedLogs(mean, eps)  # never the whole (N, C) float64 at once when it is large (issue #29)
        s_y = _label_values_blocked(s, labels)
        fits = _post_fold_fits(s, s_y, perms, (bounds[0], bounds[1]))
        hit0 = (np.argmax(mean, axis=1) == labels).astype(np.float64)
        heldout_betas = np.stack([_heldout_betas(n, perm, fits[2 * r][0], fits[2 * r + 1][0])
                                  for r, perm in enumerate(perms)])
        log_z, sq_all = _scaled_row_scores_multi(s, heldout_betas)  # every halving in one pass over the classes
        for r, perm in enumerate(perms):
            (beta_a, _), (beta_b, _) = fits[2 * r], fits[2 * r + 1]
            nll, conf, sq, q_y = _post_heldout(s, s_y, perm, beta_a, beta_b, (log_z[r], sq_all[r]))
            brier = np.maximum(sq - 2.0 * q_y + 1.0, 0.0)
            for fit_rows, eval_rows in ((perm[:half], perm[half:]), (perm[half:], perm[:half])):
                heldout.append((nll[eval_rows], conf[eval_rows], hit0[eval_rows], brier[eval_rows]))
        betas = [b for b, _ in fits]
        hits = [h for _, h in fits]
        deriv = _post_derivatives(s, s_y, float(np.mean(betas)))
    else:
        problem = _ts_problem(member_probs, labels, eps)
        s, s_y, _ = problem
        beta, folds, everyone = None, [], np.arange(n)
        for fit_half, _, eval_rows in _member_halves(problem, perms):
            beta, hit = _member_fit_half(fit_half, bounds, beta)
            betas.append(beta)
            hits.append(bool(hit))
            heldout.append(_member_heldout(s, s_y, labels, eval_rows, beta))
            folds.append((np.setdiff1d(everyone, eval_rows), eval_rows))
        deriv = _member_derivatives(s, s_y, labels, float(np.mean(betas)))
    return _assemble(n, folds, heldout, np.array(betas), hits, deriv, n_bins)


def _assemble(n, folds, heldout, betas, hits, deriv, n_bins) -> CVInfluence:
    g, h, nll_d, brier_d, conf_d = deriv
    n_folds = len(folds)
    scale = n / n_folds
    metric_d = {"calibrated_nll": nll_d, "calibrated_brier": brier_d, "calibrated_accuracy": None}
    psi = {k: np.zeros(n) for k in ("calibrated_nll", "calibrated_brier", "calibrated_accuracy", "temperature")}
    values = {k: 0.0 for k in psi}
    fold_cols = np.zeros((n, 2 * n_folds))
    slopes = np.zeros((n_folds, n_bins))
    cells, gaps = np.zeros(n, dtype=np.intp), np.zeros(n)
    halvings = []
    for f, ((fit_rows, eval_rows), (nll, conf, hit, brier), beta, at_bound) in enumerate(
            zip(folds, heldout, betas, hits)):
        # the refit: delta_f(w) = sum_i w_i coef_i (zero for a fold held at a bound)
        coef = np.zeros(n)
        if not at_bound:
            gf = g[fit_rows]
            coef[fit_rows] = -(gf - gf.mean()) / h[fit_rows].sum()
        per_metric = {"calibrated_nll": nll, "calibrated_brier": brier, "calibrated_accuracy": hit}
        for key, m in per_metric.items():
            mf = float(m.mean())
            values[key] += mf / n_folds
            psi[key][eval_rows] += scale * (m - mf) / eval_rows.shape[0]
            d = metric_d[key]
            if d is not None:
                psi[key] += scale * coef * float(d[eval_rows].mean())
        values["temperature"] += 1.0 / (beta * n_folds)
        psi["temperature"] -= scale * coef / beta**2
        bins = _equal_width_bin_index(conf, n_bins)
        cells[eval_rows] = (f % 2) * n_bins + bins
        gaps[eval_rows] = hit - conf
        fold_cols[:, f] = coef
        fold_cols[eval_rows, n_folds + f] = 1.0
        slopes[f] = np.bincount(bins, weights=-conf_d[eval_rows], minlength=n_bins)  # d(hit - conf)/d beta
        if f % 2 == 1:  # both halves of this repeat are placed
            halvings.append((Partition.of(cells.copy(), 2 * n_bins), gaps.copy()))
    for key in psi:
        psi[key] += values[key]
    psi["cll"] = -psi["calibrated_nll"]
    return CVInfluence(psi=psi, fold_columns=fold_cols, halvings=tuple(halvings), slopes=slopes, n_bins=n_bins)
