"""``coreepi store copy`` in every direction a backup or restore needs
(breaker4 #24): PostgreSQL into a data dir (every table of the schema, the
blobs with their times, idempotent), a data dir into another, and the
refusals (PostgreSQL to PostgreSQL, a data dir onto itself)."""

from __future__ import annotations

from pathlib import Path

from test_store_postgres import _cli, _fill_every_table

from coreepi.store import DirectoryBlobStore, DuckDBStore
from coreepi.store.migrations import schema_tables


def _counts(data: Path) -> dict[str, int]:
    with DuckDBStore(data, read_only=True) as store:
        return {t: store._query(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in schema_tables()}


def test_postgresql_back_into_a_data_dir(pg_url: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with DuckDBStore(data) as src:
        _fill_every_table(src)
    want = _counts(data)
    central = tmp_path / "central-blobs"
    up = _cli("store", "copy", "--from", str(data), "--to", pg_url, "--blobs", str(central))
    assert up.returncode == 0, up.stderr
    back = tmp_path / "restored"
    for attempt in range(2):  # idempotent: the second copy adds nothing
        done = _cli("store", "copy", "--from", pg_url, "--to", str(back), "--blobs",
                    str(central))
        assert done.returncode == 0, done.stderr
        assert _counts(back) == want
    assert "copied blobs 0 " in done.stdout and "alert_deliveries 0 (+2 there)" in done.stdout
    original, restored = DirectoryBlobStore(data / "blobs"), DirectoryBlobStore(back / "blobs")
    assert [(b.key, b.modified) for b in restored.entries()] == [
        (b.key, b.modified) for b in original.entries()]
    with DuckDBStore(back, read_only=True) as store:
        (record,) = store._query("SELECT crash_id, report FROM crashes").fetchall()
        assert record[0] == "bb" * 8 and '"crash_id"' in record[1]
    listed = _cli("alerts", "list", "--data-dir", str(back))
    assert listed.returncode == 0 and "h1 suspect" in listed.stdout


def test_data_dir_into_another(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with DuckDBStore(data) as src:
        _fill_every_table(src)
    copy = tmp_path / "backup"
    for _ in range(2):
        done = _cli("store", "copy", "--from", str(data), "--to", str(copy))
        assert done.returncode == 0, done.stderr
        assert _counts(copy) == _counts(data)
    assert "copied blobs 0 (0 bytes; 1 there)" in done.stdout


def test_pruned_cores_stay_pruned_in_a_copy_both_ways(pg_url: str, tmp_path: Path) -> None:
    """Before: `store copy` left the pruned/ tombstones behind, so a core
    retention had deleted read "not found" in the copy instead of "pruned"."""
    import json

    from test_cli_pruned import CRASH, _pruned_store
    from typer.testing import CliRunner

    from coreepi.cli.main import app

    data = tmp_path / "data"
    key = _pruned_store(data)
    central = tmp_path / "central-blobs"
    up = _cli("store", "copy", "--from", str(data), "--to", pg_url, "--blobs", str(central))
    assert up.returncode == 0, up.stderr
    assert "pruned marks 1 (+0 there)" in up.stdout
    assert list(DirectoryBlobStore(central).pruned_keys()) == [key]
    back = tmp_path / "back"
    for n in (1, 0):  # idempotent: the mark is there the second time
        down = _cli("store", "copy", "--from", pg_url, "--to", str(back), "--blobs", str(central))
        assert down.returncode == 0, down.stderr
        assert f"pruned marks {n} (+{1 - n} there)" in down.stdout
    for where in (["--store", pg_url, "--blobs", str(central)], ["--data-dir", str(back)]):
        listed = CliRunner().invoke(app, ["list", "--json", *where])
        assert listed.exit_code == 0, listed.output
        assert [(r["crash_id"], r["core_status"]) for r in json.loads(listed.stdout)] == [
            (CRASH, "pruned")]


def test_copies_that_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with DuckDBStore(data) as src:
        _fill_every_table(src)
    url = "postgresql://u@127.0.0.1:9/db"
    for args, said in (
            (["--from", url, "--to", url + "2"], "both PostgreSQL: copy a database with "
             "pg_dump and pg_restore"),
            (["--from", str(data), "--to", str(data)], "the same data dir as --from"),
            (["--from", str(data), "--to", str(tmp_path / "b"), "--blobs", str(tmp_path)],
             "--blobs names the PostgreSQL store's cores"),
            (["--from", str(tmp_path / "none"), "--to", str(tmp_path / "b")],
             "no coreepi store here")):
        done = _cli("store", "copy", *args)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
        assert done.stderr.count("\n") == 1
    assert not (tmp_path / "b").exists()
