# SPDX-License-Identifier: MIT
"""The ``ubench import`` command: one click command, the formats' planners do the work."""

from __future__ import annotations

import os
import sys
import zipfile
import zlib
from pathlib import Path

import click

from .kinds import KINDS, ImportFailure

FORMATS = ("npz", "npy", "pitfalls", "ovadia", "torch", "openood", "calarena")
#: ``plan.DEFAULT_MAX_BYTES`` (``ReadLimits.max_total_bytes``), spelled here so that ``--help`` imports no numpy
DEFAULT_MAX_BYTES = "32G"


def _echo(line: str) -> None:
    click.echo(line, err=True)


def _size(ctx, param, value):
    from ..sizes import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("import", epilog="Exit codes: 0 archive(s) written; 1 the torch extra is not installed (torch: "
                                "its pip install line printed); 2 usage error, or a source that is not what it "
                                "claims, too large for --max-bytes or the free disk, or a write that failed (the "
                                "file, key and first bad row printed; nothing written at --out).")
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
@click.option("--dataset", default=None, show_default="required for npz, npy, torch and ovadia; pitfalls reads it from "
                                                    "the file name",
              help="Benchmark id of the in-domain data (e.g. cifar10).")
@click.option("--method", default=None, help="Method name (ovadia: the METHOD group to import).")
@click.option("--model", default=None, help="Architecture name.")
@click.option("--member-kind", default=None, help="Kind of every member (SPEC.md §3); inferred when omitted.")
@click.option("--replicate", type=int, default=0, show_default=True, help="ovadia: which of the 5 replicates.")
@click.option("--ood", multiple=True, metavar="KEY[=DATASET]",
              help="npz/npy: array (npz) or file stem (npy) KEY is an OOD split (of DATASET; default KEY). "
                   "ovadia: a DATASET name that is an OOD set (adds to the paper's). Repeatable.")
@click.option("--shift", "shifts", multiple=True, metavar="KEY=KIND:INTENSITY",
              help="npz/npy: array / file stem KEY is a shifted split of that kind and intensity. Repeatable. "
                   "Keys named ood_<dataset> or shift_<kind>_<intensity> need no flag.")
@click.option("--max-bytes", type=click.UNPROCESSED, callback=_size, default=DEFAULT_MAX_BYTES, show_default=True,
              metavar="SIZE",
              help="Largest archive (declared probabilities) to write; checked, with the free disk, before "
                   "anything is read or written.")
@click.option("--overwrite", is_flag=True, show_default=True, help="Replace an existing archive.")
def import_cmd(fmt, sources, out, kind, labels, labels_key, key, dataset, method, model, member_kind, replicate,
               ood, shifts, max_bytes, overwrite) -> None:
    """Import existing predictions into an archive (streamed, atomic; every inferred value printed and kept).

    \b
    ubench import npz preds.npz --kind logits --dataset cifar10 --out a.h5
    ubench import npy m0.npy m1.npy --kind probs --labels y.npy --dataset mnist --out a.h5
    ubench import npz p.npz --kind logits --ood svhn --shift blur=gaussian_blur:3 --dataset cifar10 --out a.h5
    ubench import pitfalls .megacache/logits_CIFAR10-VGG16BN-deepens-100-1.npy --out a.h5
    ubench import ovadia cifar_model_predictions.hdf5 --dataset cifar10 --out ovadia/
    ubench import torch preds.pt --kind probs --dataset mnist --out a.h5
    ubench import openood scores/cifar10.npz scores/svhn.npz scores/tin.npz --method msp --out a.h5
    ubench import calarena calarena.h5 --dataset cifar10 --model resnet50 --out a.h5
    """
    from ..archive_schema.errors import ArchiveError  # h5py and numpy only when the command runs
    from .plan import write_plan

    from .plan import ImportWriteError

    if fmt == "torch":
        from ..extras import require

        require("torch", what="ubench import torch", modules=("torch",))

    try:
        for plan, target in _plans(fmt, list(sources), out, kind, labels, labels_key, key, dataset, method, model,
                                   member_kind, replicate, ood, shifts, max_bytes):
            write_plan(plan, target, overwrite=overwrite, echo=_echo, max_bytes=max_bytes)
            _echo(f"wrote {target}")
    except ImportWriteError as exc:
        click.echo(f"error: {exc}; nothing was written", err=True)
        if exc.hdf5_stuck:
            # libhdf5 keeps the file it could not close and crashes on it in its exit handler (h5py#914), after
            # this message: end here, as the error says, without running that handler
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(2)
        sys.exit(2)
    except (ImportFailure, ArchiveError, ValueError, TypeError, OSError, KeyError, EOFError, zipfile.BadZipFile,
            zlib.error, MemoryError) as exc:  # a source that is not what it claims to be: one line, exit 2
        message = str(exc) if not isinstance(exc, KeyError) else f"missing key {exc}"
        if isinstance(exc, MemoryError):
            message = "out of memory reading the sources (a declared shape larger than this machine can hold?)"
        click.echo(f"error: {type(exc).__name__ + ': ' if not isinstance(exc, ImportFailure) else ''}{message}",
                   err=True)
        sys.exit(2)


def _plans(fmt, sources, out, kind, labels, labels_key, key, dataset, method, model, member_kind, replicate, ood,
           shifts, max_bytes):
    if fmt in ("npz", "npy", "torch"):
        if kind is None:
            raise ImportFailure(f"{fmt}: say what the arrays hold with --kind {{{','.join(KINDS)}}}")
        if dataset is None:
            raise ImportFailure(f"{fmt}: name the in-domain benchmark with --dataset (e.g. cifar10)")
        common = dict(kind=kind, dataset=dataset, method=method or "imported", model=model or "unknown",
                      labels=labels, key=key, member_kind=member_kind, max_bytes=max_bytes)
        if fmt == "torch":
            if ood or shifts:
                raise ImportFailure("torch: --ood and --shift are for npz/npy; save each split as an .npz array")
            from .torch_pt import plan_torch
            yield plan_torch(sources, **common), out
        else:
            from .npz import plan_npz
            yield plan_npz(sources, labels_key=labels_key, ood=ood, shifts=shifts, **common), out
        return
    if shifts:
        raise ImportFailure(f"{fmt}: --shift is for npz/npy; {fmt} splits get their roles from their names")
    if fmt in ("openood", "calarena"):
        yield from _plans_31(fmt, sources, out, kind, dataset, method, model, max_bytes)
        return
    if kind not in (None, {"pitfalls": "log-probs", "ovadia": "probs"}[fmt]):
        raise ImportFailure(f"{fmt} files hold {'log-probs' if fmt == 'pitfalls' else 'probs'}; drop --kind {kind}")
    if fmt == "pitfalls":
        from .pitfalls import plan_pitfalls
        yield plan_pitfalls(sources, dataset=dataset, method=method, model=model, labels=labels,
                            max_bytes=max_bytes), out
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
                           ood=OOD_SETS + tuple(ood), max_bytes=max_bytes),
               out if method else out / f"{name}.h5")


def _plans_31(fmt, sources, out, kind, dataset, method, model, max_bytes):
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
