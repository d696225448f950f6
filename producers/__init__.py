# SPDX-License-Identifier: MIT
"""ubench.producers: PyTorch trainers that write prediction archives (``ubench produce``; needs ``ubench[torch]``).

One module per method (``sgd``, ``deep_ensemble``, ``mc_dropout``, ``gaussian_dropout``, ``swag``,
``snapshot_ensemble``, ``fge``, ``sgld``, ``sghmc``, ``cyclical_sgmcmc``, ``tta``) on the shared machinery of
``torch_trainer``; ``datasets``, ``shifts`` and ``task`` build the data (numpy only); ``archive_run`` writes through
``ubench.archive_schema``; ``command`` is the click command. Importing this package imports neither torch nor
torchvision: the scorer never needs them.
"""
