# SPDX-License-Identifier: MIT
"""Reproduce the producers' quality bar on Fashion-MNIST with the MLP (784-200-200-10); not part of CI.

Trains SGD, a 5-member deep ensemble, MC dropout, SWAG-diagonal, SGHMC and cSGLD through ``ubench produce``'s
library entry point, scores every archive with ``ubench.metrics`` and prints a markdown table: accuracy, NLL,
calibrated log-likelihood (CLL: Pitfalls' test-time cross-validation, 2 halves x 5 repeats of a temperature fitted
on one half and scored on the other, reported as the mean log-likelihood), Brier, ECE, and OOD AUROC (predictive
entropy) against MNIST and notMNIST. Then it checks the bar: SGD at least 88% accurate; the ensemble better than
SGD in NLL and CLL.

Run from anywhere (2 CPU cores: about 20-40 minutes; interrupted runs resume):

    python bench/reproduce_fashion_mnist.py --out-dir bench-archives --threads 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from ubench.archive_schema import read_archive
from ubench.metrics import accuracy_score, brier_loss, expected_calibration_error, nll_loss, ood_detection_scores
from ubench.metrics.temperature import apply_ensemble_temperature, fit_ensemble_temperature
from ubench.producers.archive_run import produce_archive
from ubench.producers.task import build_task
from ubench.producers.torch_trainer import RunSettings

# (label, method, members, hyperparameter overrides). URSABench appendix D MNIST settings for the samplers (rate,
# prior, burn-in, cycle shape); 12 samples each and SWAG's 20 collected iterates keep the run within the hour.
RUNS = [
    ("SGD", "sgd", 1, {"epochs": 20}),
    ("Deep ensemble (5)", "deep_ensemble", 5, {"epochs": 20}),
    ("MC dropout", "mc_dropout", 12, {"epochs": 20}),
    ("SWAG-diag", "swag_diag", 12, {"epochs": 20, "swa_epochs": 12}),
    ("SGHMC", "sghmc", 12, {"burn_in_epochs": 50}),
    ("cSGLD", "csgld", 12, {}),
]


def calibrated_log_likelihood(member_probs: np.ndarray, labels: np.ndarray, *, repeats: int = 5, seed: int = 0):
    """Pitfalls' CLL: fit a temperature on a random half, score the log-likelihood on the other, both ways."""
    rng = np.random.default_rng(seed)
    scores = []
    for _ in range(repeats):
        order = rng.permutation(len(labels))
        halves = (order[: len(order) // 2], order[len(order) // 2:])
        for fit_on, score_on in (halves, halves[::-1]):
            fit = fit_ensemble_temperature(member_probs[:, fit_on], labels[fit_on])
            scaled = apply_ensemble_temperature(member_probs[:, score_on], fit.temperature)
            scores.append(-nll_loss(scaled, labels[score_on]))
    return float(np.mean(scores))


def score(path: Path) -> dict:
    a = read_archive(path)
    probs, labels = a.probs["test"].astype(np.float64), a.labels["test"]
    mean = probs.mean(axis=0)
    row = {
        "members": probs.shape[0],
        "accuracy": accuracy_score(mean, labels),
        "nll": nll_loss(mean, labels),
        "cll": calibrated_log_likelihood(probs, labels),
        "brier": brier_loss(mean, labels),
        "ece": expected_calibration_error(mean, labels),
        "train_s": a.scalability.get("train_seconds", float("nan")),
    }
    for ood in ("ood_mnist", "ood_notmnist"):
        row[ood] = ood_detection_scores(probs, a.probs[ood].astype(np.float64))["entropy"].auroc
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=Path("bench-archives"), help="where the archives go")
    parser.add_argument("--data-dir", action="append", default=[], help="extra data directory (repeatable)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0, help="seed of every run")
    parser.add_argument("--shift-samples", type=int, default=2000, help="test images the shifts are applied to")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    task = build_task("fashion-mnist", ood=("mnist", "notmnist", "uniform"), shift_samples=args.shift_samples,
                      data_dirs=tuple(args.data_dir))
    rows = {}
    for label, method, members, hyper in RUNS:
        out = args.out_dir / f"{method}.h5"
        t0 = time.perf_counter()
        if not out.exists():
            produce_archive(method, task, out, hyper=hyper, threads=args.threads,
                            settings=RunSettings(model="mlp", members=members, seed=args.seed))
        rows[label] = score(out)
        print(f"{label}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    wall = time.perf_counter() - started
    print("| method | M | accuracy | NLL | CLL | Brier | ECE | AUROC MNIST | AUROC notMNIST | train s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, r in rows.items():
        print(f"| {label} | {r['members']} | {r['accuracy']:.4f} | {r['nll']:.4f} | {r['cll']:.4f} | "
              f"{r['brier']:.4f} | {r['ece']:.4f} | {r['ood_mnist']:.4f} | {r['ood_notmnist']:.4f} | "
              f"{r['train_s']:.0f} |")
    print(f"\nwall time {wall / 60:.1f} min (archives reused from {args.out_dir} are not retrained)")
    sgd, ens = rows["SGD"], rows["Deep ensemble (5)"]
    checks = {
        "SGD accuracy >= 0.88": sgd["accuracy"] >= 0.88,
        "ensemble NLL < SGD NLL": ens["nll"] < sgd["nll"],
        "ensemble CLL > SGD CLL": ens["cll"] > sgd["cll"],
    }
    for name, ok in checks.items():
        print(f"- {name}: {'PASS' if ok else 'FAIL'}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
