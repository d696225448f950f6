# SPDX-License-Identifier: MIT
"""Compute, once, Kull et al.'s ODIR objective numbers that tests/metrics/test_odir_oracle.py pins ubench against.

Run outside the test suite, with a checkout of github.com/dirichletcal/dirichlet_python (commit b03f65f, the
code of ``dirichletcal``; it needs jax, and its setup.py asks for Python >= 3.12, so it is imported from the
checkout rather than installed):

    python tests/data/odir_oracle/make_oracle.py /path/to/dirichlet_python

It writes ``inputs.npz`` (seeded probabilities and labels) and ``values.json`` here. Nothing of dirichletcal is
copied: its ``MultinomialRegression`` is fitted and its ``_objective`` evaluated, and the numbers are stored.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
EPS = 1e-12  # ubench's log floor: the features are log(p + eps), given to both sides as they are
#: (λ, μ) before the normalisation: large enough that dividing by C(C-1) and C rather than by C², C(C+1) or N
#: moves the optimum far beyond the solvers' tolerances (the ODIR grid's 1e1 and 1e3).
STRENGTHS = [(10.0, 10.0), (1000.0, 0.1)]


def data(seed: int = 27, n: int = 400, c: int = 4):
    """Overconfident predictions with a systematic confusion (class k often labelled k + 1), every class present."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c)) * 1.5
    true = np.exp(z - z.max(1, keepdims=True))
    true /= true.sum(1, keepdims=True)
    y = np.array([rng.choice(c, p=row) for row in true])
    shift = rng.random(n) < 0.2
    y[shift] = (y[shift] + 1) % c
    sharp = np.exp(2.5 * z)
    p = sharp / sharp.sum(1, keepdims=True)
    assert set(y.tolist()) == set(range(c))
    return p, y


def main(checkout: str) -> None:
    sys.path.insert(0, checkout)
    from dirichletcal.calib import multinomial as mr

    p, y = data()
    n, c = p.shape
    x = np.log(p + EPS)
    x1 = np.hstack([x, np.ones((n, 1))])
    target = np.eye(c)[y]
    rng = np.random.default_rng(5)
    points = [np.hstack([np.eye(c) + rng.normal(scale=s, size=(c, c)), rng.normal(scale=s, size=(c, 1))])
              for s in (0.1, 0.5, 1.0)]
    out = {"eps": EPS, "source": "dirichletcal (github.com/dirichletcal/dirichlet_python) commit b03f65f",
           "points": [w.tolist() for w in points], "fits": []}
    for lam, mu in STRENGTHS:
        model = mr.MultinomialRegression(method="Full", reg_lambda=lam, reg_mu=mu, reg_norm=True, ref_row=False)
        model.fit(x, y)
        # fit() divides the strengths (reg_norm): these are the values its _objective used
        lam_n, mu_n = float(model.reg_lambda), float(model.reg_mu)

        def objective(w):
            return float(mr._objective(np.asarray(w).ravel(), x1, None, target, c, "Full", lam_n, mu_n, False,
                                       "identity", None))

        weights = np.asarray(model.weights_)
        out["fits"].append({
            "lambda": lam, "mu": mu, "lambda_normalised": lam_n, "mu_normalised": mu_n,
            "objective_at_points": [objective(w) for w in points],
            "weights": weights.tolist(), "objective_at_fit": objective(weights),
        })
    np.savez(HERE / "inputs.npz", probs=p, labels=y)
    (HERE / "values.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
