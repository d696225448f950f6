# SPDX-License-Identifier: MIT
"""Scoring archives: archive (+ trusted reference) in, report out; HTML reports; sandboxed and distributed runs.

Sits between ``archive_schema`` (files) and ``metrics`` (arrays); ``cli.py`` only parses and formats."""
