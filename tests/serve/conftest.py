# SPDX-License-Identifier: MIT
"""A real PostgreSQL server for the serve tests, started from Debian's ``postgresql`` package in a temporary
directory (``initdb`` + ``pg_ctl``, trust authentication on loopback, as the ``postgres`` user when the tests run
as root); the tests that ask for it skip when the binaries are absent (``.ci/run`` installs them)."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

_counter = itertools.count()


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as its own user")
        return [runuser, "-u", "postgres", "--", *cmd]
    return cmd


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not installed (Debian's postgresql package)")
    pytest.importorskip("psycopg")
    # Its own directory under the system temp dir: pytest's basetemp is private to this user, and the server runs
    # as postgres when the tests run as root.
    root = Path(tempfile.mkdtemp(prefix="ubench-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        import pwd

        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    subprocess.run(_as_postgres([f"{bindir}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres"]),
                   check=True, capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(_as_postgres([f"{bindir}/pg_ctl", "-D", str(data), "-w", "-l", str(root / "log"), "-o",
                                 f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"]),
                   check=True, capture_output=True)
    yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    subprocess.run(_as_postgres([f"{bindir}/pg_ctl", "-D", str(data), "-m", "immediate", "stop"]),
                   capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


def create_database(server_url: str) -> str:
    """A fresh database on the test server at ``server_url``; its SQLAlchemy URL."""
    import psycopg

    # the pid and a counter, plus random bits: under mutation testing one process runs pytest several times
    # (statistics, clean run), the counter starting again at 0 on the same server
    name = f"ubench_t{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url.replace("postgresql+psycopg", "postgresql") + "/postgres", autocommit=True) as con:
        con.execute(f"CREATE DATABASE {name}")
    return f"{server_url}/{name}"


@pytest.fixture
def postgres_db(postgres_server):
    """A fresh database on the test server; its SQLAlchemy URL."""
    return create_database(postgres_server)
