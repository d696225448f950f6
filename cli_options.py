# SPDX-License-Identifier: MIT
"""Click options shared by ``cli.py`` and the commands that live with their code (``serve/command.py``): the
sandbox limits of every command that scores in the sandbox (``score``, ``leaderboard``, ``serve``, ...).

A module of its own because ``cli.py`` imports ``serve.command`` while it is being built: the serve command cannot
import ``cli.py`` back."""

from __future__ import annotations

import click

__all__ = ["Size", "sandbox_limit_options", "sandbox_limits"]


class Size(click.ParamType):
    """A byte count written as ``512M``, ``2G`` or a plain integer (``ubench.sizes.parse_size``)."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        from .sizes import parse_size

        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def sandbox_limit_options(f):
    """--memory-limit, --cpu-limit, --timeout (shared by score, leaderboard, serve and the others that sandbox)."""
    opts = [
        click.option("--memory-limit", type=Size(), default="4G", show_default=True,
                     help="Address-space limit of the sandboxed scoring process (e.g. 2G, 512M)."),
        click.option("--cpu-limit", type=click.IntRange(min=1), default=600, show_default=True,
                     help="CPU seconds one archive may use in the sandbox."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=900.0, show_default=True,
                     help="Wall-clock seconds one archive may take in the sandbox before it is killed."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def sandbox_limits(memory_limit: int, cpu_limit: int, timeout: float, **extra):
    """``SandboxLimits`` from the three options (and any other field in ``extra``); a bad value is a usage error."""
    from .scoring.sandbox import SandboxLimits

    try:
        return SandboxLimits(memory_bytes=memory_limit, cpu_seconds=cpu_limit, timeout_seconds=timeout, **extra)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
