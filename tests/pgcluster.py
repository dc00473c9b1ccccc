"""A throwaway PostgreSQL cluster for tests and benchmarks: initdb + pg_ctl in
a temp dir, listening on 127.0.0.1 only, on a free port.

Debian's ``postgresql`` package puts the server binaries under
``/usr/lib/postgresql/<major>/bin`` (not on PATH). initdb refuses to run as
root, so as root the cluster is made and run as the ``postgres`` system user
(``runuser -u postgres --``) in a directory it owns. :meth:`PgCluster.stop`
stops the server (``pg_ctl stop -m immediate``) and removes the directory;
it is idempotent and is also registered with :mod:`atexit`, so a session
that fails still leaves nothing running.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from servekit import free_port

__all__ = ["PgCluster", "PgUnavailable", "find_pg_bin"]


class PgUnavailable(RuntimeError):
    """No PostgreSQL server binaries here, or no way to run them (the reason)."""


def find_pg_bin() -> Path:
    """The directory holding initdb/pg_ctl/postgres: ``$COREEPI_PG_BIN``, the
    newest ``/usr/lib/postgresql/*/bin``, or PATH. Raises PgUnavailable."""
    env = os.environ.get("COREEPI_PG_BIN")
    candidates = [Path(env)] if env else []
    candidates += sorted((Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
                         key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
                         reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file():
            return c
    raise PgUnavailable("PostgreSQL server binaries not found (apt-get install postgresql, "
                        "or set COREEPI_PG_BIN)")


class PgCluster:
    """A running cluster: :attr:`url` is ``postgresql://postgres@127.0.0.1:PORT/postgres``
    (trust authentication on loopback: it is a throwaway). ``durable``: keep
    PostgreSQL's crash safety (fsync, synchronous commit: a commit is on disk
    when it returns), as benchmarks and fault runs need; else both are off."""

    def __init__(self, bin_dir: Path | None = None, durable: bool = False) -> None:
        self.bin = bin_dir or find_pg_bin()
        self.root = Path(tempfile.mkdtemp(prefix="coreepi-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        self._running = False
        if self._as_postgres:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.root, ignore_errors=True)
                raise PgUnavailable("running as root and there is no 'postgres' user to run "
                                    "initdb as") from None
            os.chmod(self.root, 0o755)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        atexit.register(self.stop)
        try:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                      "-E", "UTF8", "--no-sync", "--locale=C")
            conf = (f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                    f"unix_socket_directories = '{self.root}'\nmax_connections = 200\n")
            if not durable:  # tests: speed over crash safety (the data is thrown away)
                conf += "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            self._run("sh", "-c", f"cat >> {self.data}/postgresql.conf", stdin=conf)
            self.start()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, cmd: str, *args: str, stdin: str | None = None) -> None:
        exe = str(self.bin / cmd) if (self.bin / cmd).exists() else cmd
        argv = [exe, *args]
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False,
                              cwd=self.root)
        if done.returncode != 0:
            raise PgUnavailable(f"{cmd} failed ({done.returncode}): "
                                f"{(done.stderr or done.stdout).strip()[-500:]}")

    def start(self) -> None:
        """Start (or restart after :meth:`kill`) the server; waits until it accepts."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                  "-t", "60", "start")
        self._running = True

    def restart(self) -> None:
        """Stop immediately (no checkpoint: like a crash) and start again."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.start()

    def stop(self) -> None:
        """Stop the server and remove its directory (idempotent)."""
        if self._running:
            self._running = False
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            except (PgUnavailable, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.stop)

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"
