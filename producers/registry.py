# SPDX-License-Identifier: MIT
"""The producer methods by name, without importing torch (the command lists them in its help)."""

from __future__ import annotations

import importlib

__all__ = ["METHODS", "load_method"]

#: method name -> "module:Class" inside ``ubench.producers``.
METHODS: dict[str, str] = {
    "sgd": "sgd:SGDPointEstimate",
    "deep_ensemble": "deep_ensemble:DeepEnsemble",
    "mc_dropout": "mc_dropout:MCDropout",
    "gaussian_dropout": "gaussian_dropout:MCGaussianDropout",
    "swag_diag": "swag:SWAGDiagonal",
    "swag": "swag:SWAG",
    "sse": "snapshot_ensemble:SnapshotEnsemble",
    "fge": "fge:FastGeometricEnsemble",
    "sgld": "sgld:SGLD",
    "sghmc": "sghmc:SGHMC",
    "csgld": "cyclical_sgmcmc:CyclicalSGLD",
    "csghmc": "cyclical_sgmcmc:CyclicalSGHMC",
    "tta": "tta:TestTimeAugmentation",
    "hmc": "hmc:HMC",
    "vi": "vi:VariationalInference",
    "ll_svi": "last_layer:LastLayerSVI",
    "ll_dropout": "last_layer:LastLayerDropout",
    "kfac_laplace": "laplace:KFACLaplace",
    "ll_laplace": "laplace:LastLayerLaplace",
    "diag_laplace": "laplace:DiagonalLaplace",
    "swa": "swa:SWA",
    "swag_dropout": "swag:SWAGDropout",
    "subspace_ess": "subspace:SubspaceESS",
    # issue #31: the peers' methods
    "batch_ensemble": "efficient_ensembles:BatchEnsemble",
    "packed_ensembles": "efficient_ensembles:PackedEnsembles",
    "mimo": "efficient_ensembles:MIMO",
    "mc_batchnorm": "mc_batchnorm:MCBatchNorm",
    "evidential": "evidential:Evidential",
    "sngp": "sngp:SNGP",
    "ddu": "ddu:DDU",
}


def load_method(name: str) -> type:
    """The :class:`~ubench.producers.torch_trainer.Method` subclass of ``name`` (imports torch); ``NAME+tta`` is
    method NAME with test-time augmentation on top (:func:`ubench.producers.tta.with_tta`)."""
    if name.endswith("+tta") and name[:-4] in METHODS:
        from .tta import with_tta

        return with_tta(load_method(name[:-4]))
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    module, cls = METHODS[name].split(":")
    return getattr(importlib.import_module(f"ubench.producers.{module}"), cls)
