# SPDX-License-Identifier: MIT
"""Reproduce the producers' quality bar on Fashion-MNIST with the MLP (784-200-200-10); not part of CI.

Trains a 5-member deep ensemble, SGD, MC dropout, SWAG-diagonal, SGHMC and cSGLD, and issue #12's VI, KFAC-Laplace,
SWA, SWAG-Dropout, the deep ensemble with test-time augmentation (and subspace ESS where the registry has it), and
issue #31's BatchEnsemble, Packed-Ensembles, MIMO, MC batch norm, evidential, SNGP and DDU (the last three also with
their own score's OOD AUROC),
through ``ubench produce``'s library entry point (each method's defaults: URSABench's tuned MLP values for the
samplers, swa_gaussian's scale for SWAG) and scores every archive with ``ubench.metrics``: accuracy, NLL, Brier and
ECE of the ensemble mean; calibrated log-likelihood (CLL: Pitfalls' test-time cross-validation,
``cross_validated_calibration`` with its defaults, 2 halves x 5 repeats, temperature after averaging); DEE of that
CLL against the deep ensemble's CLL-versus-members curve (``dee_reference``, 5 member orders); OOD AUROC of the
predictive entropy against MNIST and notMNIST. Then it checks the bar: SGD at least 88% accurate; the ensemble
better than SGD in NLL and CLL.

Results go to ``bench/results/reproduce_fashion_mnist.json`` (the bench JSON convention: script, date, machine,
load, rows; rewritten after every method, ``complete`` false until the last), from which ``bench/render.py`` builds
the README table; ``--markdown`` prints that table from the JSON without training.

Run from anywhere (2 CPU cores: about an hour; interrupted runs resume from the archives and their partial runs):

    python bench/reproduce_fashion_mnist.py --out-dir /tmp/fmnist-archives --threads 2

On a loaded machine, train runs side by side (``--methods sghmc --json /tmp/sghmc.json``, one process each) and
then write the table of whatever finished with ``--score-only``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from ubench.archive_schema import read_archive
from ubench.metrics import accuracy_score, brier_loss, expected_calibration_error, nll_loss, ood_detection_scores
from ubench.metrics.dee import dee_reference, dee_score
from ubench.metrics.protocol import cross_validated_calibration
from ubench.producers.archive_run import produce_archive
from ubench.producers.registry import METHODS, load_method
from ubench.producers.task import build_task
from ubench.producers.torch_trainer import RunSettings

RESULTS = Path(__file__).resolve().parent / "results" / "reproduce_fashion_mnist.json"
ENSEMBLE = "deep ensemble"

# (label, method, members, hyperparameter overrides). The deep ensemble comes first: it is every row's DEE
# reference. 12 samples each and SWAG's 12 collected iterates keep the run near the hour.
# The rows after cSGLD are issue #12's methods, each at its defaults (VI: 20 pretraining + 20 VI epochs; KFAC-Laplace:
# its noise scale searched on a 10% validation split held out of the training set, sampling the inverse of its
# precision; issue #30 adds the Pitfalls code's draw and laplace-torch's last-layer Laplace beside it; SWA and
# SWAG-Dropout: SWAG-diagonal's schedule; the deep ensemble with TTA: trained on random crops, each member on its own
# crop).
# A method the registry does not have (subspace_ess lands with the samplers branch) is left out.
_ALL_RUNS = [
    (ENSEMBLE, "deep_ensemble", 5, {"epochs": 20}),
    ("SGD", "sgd", 1, {"epochs": 20}),
    ("MC dropout", "mc_dropout", 12, {"epochs": 20}),
    ("SWAG-diagonal", "swag_diag", 12, {"epochs": 20, "swa_epochs": 12}),
    ("SGHMC", "sghmc", 12, {}),
    ("cSGLD", "csgld", 12, {}),
    ("VI", "vi", 12, {}),
    ("KFAC-Laplace", "kfac_laplace", 12, {}),
    ("KFAC-Laplace, Pitfalls covariance", "kfac_laplace@pitfalls", 12, {"covariance": "pitfalls"}),
    ("LL-Laplace, laplace-torch (kron, GGN, marglik)", "ll_laplace@laplace_torch", 12,
     {"structure": "kron", "hessian": "ggn", "prior": "marglik"}),
    ("SWA", "swa", 1, {"epochs": 20, "swa_epochs": 12}),
    ("SWAG-Dropout", "swag_dropout", 12, {"epochs": 20, "swa_epochs": 12}),
    ("deep ensemble + TTA", "deep_ensemble+tta", 5, {"epochs": 20}),
    ("subspace ESS", "subspace_ess", 12, {}),
    # issue #31: the peers' methods at their defaults for 20 epochs; the single models report their own score's
    # OOD AUROC beside the predictive entropy's (columns "own score")
    ("BatchEnsemble", "batch_ensemble", 4, {"epochs": 20}),
    ("Packed-Ensembles", "packed_ensembles", 4, {"epochs": 20}),
    ("MIMO", "mimo", 3, {"epochs": 20}),
    ("MC batch norm", "mc_batchnorm", 12, {"epochs": 20}),
    ("evidential", "evidential", 1, {"epochs": 20}),
    ("SNGP", "sngp", 1, {"epochs": 20}),
    ("DDU", "ddu", 1, {"epochs": 20}),
]


def method_of(run: str) -> str:
    """The producer method of a run id: ``kfac_laplace@pitfalls`` is ``kfac_laplace`` with other hyperparameters
    (its archive is ``kfac_laplace@pitfalls.h5``); ``deep_ensemble+tta`` is itself a method."""
    return run.split("@")[0]


RUNS = [r for r in _ALL_RUNS if method_of(r[1]).removesuffix("+tta") in METHODS]
COLUMNS = [("members", "M", "{}"), ("accuracy", "accuracy", "{:.4f}"), ("nll", "NLL", "{:.4f}"),
           ("cll", "CLL", "{:.4f}"), ("dee", "DEE", "{:.2f}"), ("ood_auroc_mnist", "OOD AUROC MNIST", "{:.4f}"),
           ("ood_auroc_notmnist", "OOD AUROC notMNIST", "{:.4f}"), ("own_score", "own score", "{}"),
           ("ood_auroc_own_mnist", "own-score OOD AUROC MNIST", "{:.4f}"),
           ("ood_auroc_own_notmnist", "own-score OOD AUROC notMNIST", "{:.4f}"), ("minutes", "minutes", "{:.1f}")]


def machine() -> dict:
    """What ran the benchmark."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
        with open("/proc/meminfo") as f:
            mem_kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
    except OSError:
        mem_kib = 0
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kib / 2 ** 20, 1),
            "python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads()}


def load_now() -> dict:
    """Load averages and the kernel's running/total process count (other jobs share the machine)."""
    la = os.getloadavg()
    try:
        with open("/proc/loadavg") as f:
            running = f.read().split()[3]
    except OSError:
        running = "unknown"
    return {"loadavg": [round(x, 2) for x in la], "running_processes": running}


def ensemble_reference(path: Path):
    """The DEE reference curve of the deep-ensemble archive at ``path``."""
    a = read_archive(path)
    return dee_reference(a.probs["test"].astype(np.float64), a.labels["test"])


def dee_fields(cll: float, reference) -> dict:
    """A row's DEE keys from its CLL and the deep ensemble's ``dee_reference`` (None: no DEE). The DEE depends on
    nothing else, so a row whose archive is gone gets them from its stored CLL (``--merge``)."""
    dee = None if reference is None else dee_score(cll, reference.cll_mean, reference.cll_std)
    # below one deep-ensemble member: null with the flag (read "< 1"), as the reports give it, never 1
    return {"dee": None if dee is None or dee.below_reference else dee.dee,
            "dee_lower": None if dee is None or dee.lower_below else dee.lower,
            "dee_upper": None if dee is None or dee.upper_below else dee.upper,
            "dee_beyond_reference": None if dee is None else dee.beyond_reference,
            "dee_below_reference": None if dee is None else dee.below_reference}


def score(path: Path, reference) -> dict:
    """One table row from an archive; ``reference`` is the deep ensemble's ``dee_reference`` (None: no DEE)."""
    a = read_archive(path)
    probs, labels = a.probs["test"].astype(np.float64), a.labels["test"]
    mean = probs.mean(axis=0)
    cal = cross_validated_calibration(probs, labels)
    sc = a.header.scalability or {}
    return {
        "members": int(probs.shape[0]),
        "accuracy": accuracy_score(mean, labels),
        "nll": nll_loss(mean, labels),
        "cll": cal.cll,
        **dee_fields(cal.cll, reference),
        "brier": brier_loss(mean, labels),
        "ece": expected_calibration_error(mean, labels),
        **{f"ood_auroc_{name}": ood_detection_scores(probs, a.probs[f"ood_{name}"].astype(np.float64))[
            "entropy"].auroc for name in ("mnist", "notmnist")},
        **own_score(a),
        "minutes": (sc.get("train_seconds", float("nan")) + sc.get("predict_seconds", 0.0)) / 60.0,
        "hyperparameters": a.header.config.get("hyperparameters", {}),
        "producer": a.header.config.get("producer"),
        "archive_created": a.header.provenance.get("created"),
    }


def own_score(a) -> dict:
    """The method's own score (format 1.1, the first it declares) and its OOD AUROC against MNIST and notMNIST
    (positive = OOD, a ``confidence`` score negated); ``None`` for methods without one."""
    from ubench.metrics import auroc_score

    declared = a.header.splits["test"].scores
    if not declared:
        return {"own_score": None, "ood_auroc_own_mnist": None, "ood_auroc_own_notmnist": None}
    name, direction = next(iter(declared.items()))
    sign = 1.0 if direction == "uncertainty" else -1.0
    out = {"own_score": name}
    for ood in ("mnist", "notmnist"):
        neg, pos = a.scores["test"][name], a.scores[f"ood_{ood}"][name]
        out[f"ood_auroc_own_{ood}"] = auroc_score(sign * np.concatenate([neg, pos]),
                                                  np.r_[np.zeros(len(neg)), np.ones(len(pos))].astype(int))
    return out


def markdown(doc: dict) -> str:
    """The README table of a results document."""
    lines = ["| method | " + " | ".join(h for _, h, _ in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for r in doc["rows"]:
        lines.append(f"| {r['method']} | " + " | ".join(
            "< 1" if k == "dee" and r.get("dee_below_reference") else "n/a" if r.get(k) is None
            else fmt.format(r[k]) for k, _, fmt in COLUMNS) + " |")
    return "\n".join(lines)


def checks(rows: dict) -> dict:
    sgd, ens = rows.get("SGD"), rows.get(ENSEMBLE)
    if sgd is None or ens is None:
        return {}
    return {
        "SGD accuracy >= 0.88": sgd["accuracy"] >= 0.88,
        "ensemble NLL < SGD NLL": ens["nll"] < sgd["nll"],
        "ensemble CLL > SGD CLL": ens["cll"] > sgd["cll"],
    }


def merge(docs: list[dict]) -> dict:
    """One results document from several (runs trained in separate processes): rows in ``RUNS`` order, the
    earliest date, each part's load and settings kept beside its method names."""
    order = {m: i for i, (_, m, _, _) in enumerate(RUNS)}
    rows = sorted((r for d in docs for r in d["rows"]), key=lambda r: order[r["method_id"]])
    twice = sorted({r["method_id"] for r in rows if sum(q["method_id"] == r["method_id"] for q in rows) > 1})
    if twice:
        raise SystemExit(f"--merge: {', '.join(twice)} appear in more than one results file")
    by_label = {r["method"]: r for r in rows}
    # A results file that is itself a merge contributes its parts as they are (no nesting).
    parts = [part for d in docs for part in (d["load"]["parts"] if "parts" in d["load"] else [
        {"methods": [r["method_id"] for r in d["rows"]], "date": d["date"], **d["load"], "settings": d["settings"],
         "wall_minutes": d.get("wall_minutes")}])]
    return {"script": docs[0]["script"], "date": min(d["date"] for d in docs), "machine": docs[0]["machine"],
            "load": {"parts": parts},
            "settings": docs[0]["settings"], "complete": len(rows) == len(RUNS), "checks": checks(by_label),
            "rows": rows}


def write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    tmp.replace(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=Path("bench-archives"), help="where the archives go")
    parser.add_argument("--data-dir", action="append", default=[], help="extra data directory (repeatable)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0, help="seed of every run")
    parser.add_argument("--shift-samples", type=int, default=2000, help="test images the shifts are applied to")
    parser.add_argument("--json", type=Path, default=RESULTS, help="results file (default: %(default)s)")
    parser.add_argument("--markdown", action="store_true", help="print the table of --json and exit")
    parser.add_argument("--methods", default=",".join(m for _, m, _, _ in RUNS),
                        help="comma-separated subset of the runs, e.g. to train two in parallel processes with "
                             "separate --json files (default: all); a final run over all scores them together")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, metavar="JSON",
                        help="train nothing: combine the results files of runs trained side by side into --json, "
                             "rescoring their archives in --out-dir (so every row gets its DEE once the deep "
                             "ensemble's archive exists)")
    parser.add_argument("--score-only", action="store_true",
                        help="train nothing: score the finished archives in --out-dir, leave the others out")
    args = parser.parse_args(argv)
    wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(wanted) - {m for _, m, _, _ in RUNS})
    if unknown:
        parser.error(f"--methods: unknown run(s) {', '.join(unknown)}")
    if args.markdown:
        print(markdown(json.loads(args.json.read_text())))
        return 0
    if args.merge:
        doc = merge([json.loads(p.read_text()) for p in args.merge])
        ensemble_archive = args.out_dir / f"{RUNS[0][1]}.h5"
        reference = ensemble_reference(ensemble_archive) if ensemble_archive.exists() else None
        # A row whose archive is no longer in --out-dir keeps the scores its results file holds, but its DEE is
        # taken again from its CLL against this deep ensemble, so every row of the table has the same reference.
        doc["rows"] = [{"method": r["method"], "method_id": r["method_id"],
                        **score(args.out_dir / f"{r['method_id']}.h5", reference)}
                       if (args.out_dir / f"{r['method_id']}.h5").exists()
                       else {**r, **(dee_fields(r["cll"], reference) if reference is not None else {})}
                       for r in doc["rows"]]
        doc["checks"] = checks({r["method"]: r for r in doc["rows"]})
        write(args.json, doc)
        print(markdown(doc))
        return 0
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"script": "bench/reproduce_fashion_mnist.py",
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": machine(), "load": {"before": load_now(), "after": None},
           "settings": {"model": "mlp", "seed": args.seed, "threads": args.threads,
                        "shift_samples": args.shift_samples, "archives": str(args.out_dir)},
           "complete": False, "rows": []}
    runs = [r for r in RUNS if r[1] in wanted]
    if args.score_only:
        runs = [r for r in runs if (args.out_dir / f"{r[1]}.h5").exists()]
    tasks: dict = {}  # one task per validation fraction (KFAC-Laplace holds 10% of the training set out)

    def task_for(method: str):
        fraction = load_method(method).default_val_fraction
        if fraction not in tasks:
            tasks[fraction] = build_task("fashion-mnist", ood=("mnist", "notmnist", "uniform"),
                                         shift_samples=args.shift_samples, data_dirs=tuple(args.data_dir),
                                         val_fraction=fraction)
        return tasks[fraction]
    for _, method, _, hyper in runs:  # import every method now and check its overrides before hours of training
        load_method(method_of(method)).resolve_hyperparameters(hyper)
    ensemble_archive = args.out_dir / f"{RUNS[0][1]}.h5"
    reference = ensemble_reference(ensemble_archive) if ensemble_archive.exists() else None
    rows = {}
    for label, method, members, hyper in runs:
        out = args.out_dir / f"{method}.h5"
        t0 = time.perf_counter()
        if not out.exists():
            produce_archive(method_of(method), task_for(method_of(method)), out, hyper=hyper, threads=args.threads,
                            settings=RunSettings(model="mlp", members=members, seed=args.seed))
        if out == ensemble_archive and reference is None:
            reference = ensemble_reference(out)
        rows[label] = score(out, reference)
        doc["rows"].append({"method": label, "method_id": method, **rows[label]})
        doc["load"]["after"] = load_now()
        doc["wall_minutes"] = (time.perf_counter() - started) / 60.0
        doc["checks"] = checks(rows)
        doc["complete"] = len(doc["rows"]) == len(RUNS)
        write(args.json, doc)
        print(f"{label}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print(markdown(doc))
    print(f"\nwall time {doc['wall_minutes']:.1f} min (archives reused from {args.out_dir} are not retrained)")
    for name, ok in doc["checks"].items():
        print(f"- {name}: {'PASS' if ok else 'FAIL'}")
    return 0 if all(doc["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
