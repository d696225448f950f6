# SPDX-License-Identifier: MIT
"""Structural reader of prediction-archive v1.1 (issue #31): the v1.0 layout plus, per split, optional ``logits``
(SPEC.md §4.3) and an optional ``scores`` group of method scores (§4.4).

The 1.0 reader (``read_v1``, frozen) parses everything 1.0 names; this module adds the two objects to each split it
accepted. Values are checked afterwards by the validator, in bounded blocks like ``probs``.
"""

from __future__ import annotations

import dataclasses

from .read_v1 import Parsed, _dataset, _str, read_v1_0
from .registry import register_reader
from .safe_h5py import h5py
from .scan import Scan, child
from .spec import LOGIT_DTYPES, RESERVED_SCORE_NAMES, SCORE_DIRECTIONS, SCORE_DTYPES, SPLIT_NAME, V1_1

__all__ = ["read_v1_1"]


def _logits(scan: Scan, g: h5py.Group, where: str, safe: set[str], probs: h5py.Dataset) -> h5py.Dataset | None:
    """Optional ``logits``: float16/32/64 of the shape of ``probs``."""
    ds = _dataset(scan, g, "logits", where, safe, 3, "f", required=False)
    if ds is None:
        return None
    if ds.dtype not in LOGIT_DTYPES:
        scan.add(f"{where}/logits", "dtype", f"must be float16, float32 or float64; found {ds.dtype}")
        return None
    if ds.shape != probs.shape:
        scan.add(f"{where}/logits", "shape", f"shape {ds.shape} differs from probs' {probs.shape}")
        return None
    return ds


def _scores(scan: Scan, g: h5py.Group, where: str, safe: set[str], n: int
            ) -> tuple[dict[str, str], dict[str, h5py.Dataset]] | None:
    """Optional ``scores`` group: name -> direction, and name -> (N,) float dataset; None when it is broken."""
    if "scores" not in g:
        return {}, {}
    sg, gpath = child(g, "scores"), f"{where}/scores"
    if not isinstance(sg, h5py.Group):
        scan.add(gpath, "object-type", "must be a group")
        return None
    kind = _str(scan, sg, "ubench_kind", gpath)
    if kind is not None and kind != "scores":
        scan.add(gpath, "value", f"ubench_kind must be 'scores'; found {kind!r}")
    if len(sg) > scan.limits.max_scores:
        scan.add(gpath, "size-limit", f"{len(sg)} scores; at most {scan.limits.max_scores}")
        return None
    directions, nodes = {}, {}
    for name in sg:
        path = f"{gpath}/{name}"
        if not SPLIT_NAME.match(name) or name in RESERVED_SCORE_NAMES:
            scan.add(path, "name", f"score names must match {SPLIT_NAME.pattern} and not be one of "
                     f"{RESERVED_SCORE_NAMES} (a scorer derives those from logits)")
            continue
        ds = _dataset(scan, sg, name, gpath, safe, 1, "f")
        if ds is None:
            continue
        if ds.dtype not in SCORE_DTYPES:
            scan.add(path, "dtype", f"must be float32 or float64; found {ds.dtype}")
            continue
        if ds.shape[0] != n:
            scan.add(path, "shape", f"has {ds.shape[0]} entries but n_samples is {n}")
            continue
        direction = _str(scan, ds, "direction", path)
        if direction is not None and direction not in SCORE_DIRECTIONS:
            scan.add(path, "value", f"direction must be one of {SCORE_DIRECTIONS}; found {direction!r}")
            continue
        if direction is not None:
            directions[name], nodes[name] = direction, ds
    return directions, nodes


def _same_everywhere(scan: Scan, splits: dict, logits: dict[str, bool], scores: dict[str, dict[str, str]]) -> None:
    """§4.3-4.4: logits are in every split or in none; every split declares the same scores, same directions."""
    names = list(splits)
    with_logits = [s for s in names if logits[s]]
    if with_logits and len(with_logits) != len(names):
        missing = next(s for s in names if not logits[s])
        scan.add(f"/splits/{missing}", "logits-missing", f"split {with_logits[0]!r} has logits but {missing!r} has "
                 "none; logits are stored for every split or for none")
    first = names[0]
    for name in names[1:]:
        if scores[name] != scores[first]:
            scan.add(f"/splits/{name}/scores", "scores-differ",
                     f"declares scores {scores[name]} but split {first!r} declares {scores[first]}; every split "
                     "declares the same scores with the same directions")
            return


@register_reader(V1_1)
def read_v1_1(scan: Scan, f: h5py.File, safe: set[str], version: str) -> Parsed | None:
    """Parse the v1.1 layout: v1.0, then each split's optional logits and method scores."""
    parsed = read_v1_0(scan, f, safe, version)
    if parsed is None:
        return None
    header, nodes = parsed.header, dict(parsed.nodes)
    has_logits: dict[str, bool] = {}
    declared: dict[str, dict[str, str]] = {}
    for name, info in header.splits.items():
        where = f"/splits/{name}"
        g = f["splits"][name]
        ds = _logits(scan, g, where, safe, nodes[(name, "probs")])
        has_logits[name] = ds is not None
        if ds is not None:
            nodes[(name, "logits")] = ds
        found = _scores(scan, g, where, safe, info.n_samples)
        if found is not None:
            declared[name] = found[0]
            nodes.update({(name, f"scores/{s}"): d for s, d in found[1].items()})
    if not scan.ok:
        return None
    _same_everywhere(scan, header.splits, has_logits, declared)
    if not scan.ok:
        return None
    splits = {name: dataclasses.replace(info, has_logits=has_logits[name], scores=declared[name])
              for name, info in header.splits.items()}
    return Parsed(dataclasses.replace(header, splits=splits), nodes)
