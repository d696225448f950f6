# SPDX-License-Identifier: MIT
"""The ``ubench import`` command: one click command, the formats' planners do the work."""

from __future__ import annotations

import sys
import zipfile
import zlib
from pathlib import Path

import click

from .kinds import KINDS, ImportFailure

FORMATS = ("npz", "npy", "pitfalls", "ovadia", "torch", "openood", "calarena")


def _echo(line: str) -> None:
    click.echo(line, err=True)


@click.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(FORMATS))
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Archive to write (ovadia without --method: a directory, one archive per method).")
@click.option("--kind", type=click.Choice(KINDS), default=None, show_default=True,
              help="What the arrays hold (npz/npy/torch; required there). pitfalls: log-probs; ovadia: probs.")
@click.option("--labels", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Labels file: .npy, .npz, .pt or text (one integer per line).")
@click.option("--labels-key", default=None, help="Array of the --labels .npz holding the labels.")
@click.option("--key", default=None, help="Array / dict key holding the predictions when there are several.")
@click.option("--dataset", default=None, help="Benchmark id of the in-domain data (e.g. cifar10).")
@click.option("--method", default=None, help="Method name (ovadia: the METHOD group to import).")
@click.option("--model", default=None, help="Architecture name.")
@click.option("--member-kind", default=None, help="Kind of every member (SPEC.md §3); inferred when omitted.")
@click.option("--replicate", type=int, default=0, show_default=True, help="ovadia: which of the 5 replicates.")
@click.option("--ood", multiple=True, help="ovadia: a DATASET name that is an OOD set (adds to the paper's).")
@click.option("--overwrite", is_flag=True, show_default=True, help="Replace an existing archive.")
def import_cmd(fmt, sources, out, kind, labels, labels_key, key, dataset, method, model, member_kind, replicate,
               ood, overwrite) -> None:
    """Import existing predictions into an archive (streamed, atomic; every inferred value printed and kept).

    \b
    ubench import npz preds.npz --kind logits --dataset cifar10 --out a.h5
    ubench import npy m0.npy m1.npy --kind probs --labels y.npy --dataset mnist --out a.h5
    ubench import pitfalls .megacache/logits_CIFAR10-VGG16BN-deepens-100-1.npy --out a.h5
    ubench import ovadia cifar_model_predictions.hdf5 --dataset cifar10 --out ovadia/
    ubench import torch preds.pt --kind probs --dataset mnist --out a.h5
    ubench import openood scores/cifar10.npz scores/svhn.npz scores/tin.npz --method msp --out a.h5
    ubench import calarena calarena.h5 --dataset cifar10 --model resnet50 --out a.h5
    """
    from ..archive_schema.errors import ArchiveError  # h5py and numpy only when the command runs
    from .plan import write_plan

    try:
        for plan, target in _plans(fmt, list(sources), out, kind, labels, labels_key, key, dataset, method, model,
                                   member_kind, replicate, ood):
            write_plan(plan, target, overwrite=overwrite, echo=_echo)
            _echo(f"wrote {target}")
    except (ImportFailure, ArchiveError, ValueError, TypeError, OSError, KeyError, EOFError, zipfile.BadZipFile,
            zlib.error) as exc:  # a source that is not what it claims to be: one line, exit 2
        message = str(exc) if not isinstance(exc, KeyError) else f"missing key {exc}"
        click.echo(f"error: {type(exc).__name__ + ': ' if not isinstance(exc, ImportFailure) else ''}{message}",
                   err=True)
        sys.exit(2)


def _plans(fmt, sources, out, kind, labels, labels_key, key, dataset, method, model, member_kind, replicate, ood):
    if fmt in ("npz", "npy", "torch"):
        if kind is None:
            raise ImportFailure(f"{fmt}: say what the arrays hold with --kind {{{','.join(KINDS)}}}")
        if dataset is None:
            raise ImportFailure(f"{fmt}: name the in-domain benchmark with --dataset (e.g. cifar10)")
        common = dict(kind=kind, dataset=dataset, method=method or "imported", model=model or "unknown",
                      labels=labels, key=key, member_kind=member_kind)
        if fmt == "torch":
            from .torch_pt import plan_torch
            yield plan_torch(sources, **common), out
        else:
            from .npz import plan_npz
            yield plan_npz(sources, labels_key=labels_key, **common), out
        return
    if fmt in ("openood", "calarena"):  # issue #31: importers/openood.py and importers/calarena.py
        yield from _plans_31(fmt, sources, out, kind, dataset, method, model)
        return
    if kind not in (None, {"pitfalls": "log-probs", "ovadia": "probs"}[fmt]):
        raise ImportFailure(f"{fmt} files hold {'log-probs' if fmt == 'pitfalls' else 'probs'}; drop --kind {kind}")
    if fmt == "pitfalls":
        from .pitfalls import plan_pitfalls
        yield plan_pitfalls(sources, dataset=dataset, method=method, model=model, labels=labels), out
        return
    from .ovadia import OOD_SETS, methods_of, plan_ovadia
    if len(sources) != 1:
        raise ImportFailure("ovadia: give one release file (e.g. cifar_model_predictions.hdf5)")
    if dataset is None:
        raise ImportFailure("ovadia: name the in-domain benchmark with --dataset (mnist, cifar10, imagenet)")
    src = sources[0]
    methods = [method] if method else methods_of(src)
    if not methods:
        raise ImportFailure(f"{src}: no METHOD group at the top level (expected METHOD > DATASET > {{labels, probs}})")
    if method is None:
        out.mkdir(parents=True, exist_ok=True)
        _echo(f"inferred methods: {', '.join(methods)} (one archive each in {out})")
    for name in methods:
        yield (plan_ovadia(src, name, dataset=dataset, replicate=replicate, model=model or "unknown",
                           ood=OOD_SETS + tuple(ood)),
               out if method else out / f"{name}.h5")


def _plans_31(fmt, sources, out, kind, dataset, method, model):
    """OpenOOD score files (one archive) and CalArena's HDF5 (one archive per model, or the one --model names)."""
    if kind not in (None, "probs"):
        raise ImportFailure(f"{fmt}: the files say what they hold; drop --kind {kind}")
    if fmt == "openood":
        from .openood import plan_openood
        yield plan_openood(sources, dataset=dataset, method=method, model=model or "unknown"), out
        return
    from .calarena import datasets_and_models, open_calarena, plan_calarena
    if len(sources) != 1:
        raise ImportFailure("calarena: give one HDF5 file")
    checked = open_calarena(sources[0])
    found = datasets_and_models(checked[0])
    if dataset is None or dataset not in found:
        checked[0].close()
        raise ImportFailure(f"calarena: name the dataset group with --dataset (the file has {sorted(found)[:20]})")
    models = [model] if model else found[dataset]
    from ..archive_schema.spec import is_split_name
    bad = [m for m in models if not is_split_name(m)]
    if model is None and bad:
        checked[0].close()
        raise ImportFailure(f"calarena: model {bad[0]!r} cannot name an archive file; import it with --model")
    if model is None:
        out.mkdir(parents=True, exist_ok=True)
        _echo(f"inferred models: {', '.join(models)} (one archive each in {out})")
    try:
        for name in models:
            yield (plan_calarena(sources[0], dataset=dataset, model=name, file=checked, method=method),
                   out if model else out / f"{name}.h5")
    finally:
        checked[0].close()
