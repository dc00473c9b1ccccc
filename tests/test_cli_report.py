"""`coreepi report` text as a terminal user reads it: the answer in the
first lines, no line wider than the terminal, no identifier split across
lines; a short report for an empty window; exit 2 for a missing data dir;
the pager on a terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clikit import cli, in_pty
from test_report import fill_store

from coreepi.epi.models import FleetFindings
from coreepi.reporting import build_findings
from coreepi.store import open_store

BOX = re.compile(r"[│┃┏┓┗┛┡┩━─┳┻╇┼├┤╋•·]")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("clireport") / "data"
    with open_store(d) as store:
        fill_store(store)
    return d


@pytest.fixture(scope="module")
def findings(data_dir: Path) -> FleetFindings:
    with open_store(data_dir, read_only=True) as store:
        return build_findings(store)


def identifiers(f: FleetFindings) -> set[str]:
    """Every name the report prints from the findings: host ids, the words of
    group keys, attribute=value pairs."""
    out = {h.host_id for h in f.hosts}
    for g in f.groups:
        out |= {w for w in g.key.split() if w != "|"}
        out |= {f"{a.attribute}={a.value}" for a in g.associations}
    return {i for i in out if len(i) > 2}


def words(line: str) -> list[str]:
    return BOX.sub(" ", line).split()


@pytest.mark.parametrize("columns", [80, 120])
def test_report_fits_the_terminal_and_answers_first(data_dir: Path, findings: FleetFindings,
                                                    columns: int) -> None:
    done = cli("report", "--data-dir", str(data_dir), env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    # the answer comes first: the hardware-suspect host in the first 10 lines
    assert findings.hosts[0].attribution.verdict == "hardware-suspect"
    assert any("hardware-suspect host h-017" in line for line in lines[:10]), lines[:10]
    # no identifier split: the last word of a line and the first of the next
    # never make an identifier together that neither holds alone
    names = identifiers(findings)
    for a, b in zip(lines, lines[1:], strict=False):
        wa, wb = words(a), words(b)
        if not wa or not wb:
            continue
        joined = wa[-1] + wb[0]
        broken = [n for n in names if n in joined and n not in wa[-1] and n not in wb[0]]
        assert not broken, (a, b, broken)
    text = done.stdout
    shown = [n for n in names if n in text]
    assert "h-017" in shown
    assert "kernel=6.1.0 triggers io_uring_submit | Ring::flush" in " ".join(text.split())
    assert "…" not in text  # nothing cut


def test_details_has_every_group_and_the_associations(data_dir: Path,
                                                      findings: FleetFindings) -> None:
    short = cli("report", "--data-dir", str(data_dir), env={"COLUMNS": "80"})
    full = cli("report", "--details", "--data-dir", str(data_dir), env={"COLUMNS": "80"})
    assert full.returncode == 0, full.stderr
    assert "Strongest attribute associations" in full.stdout
    assert "Strongest attribute associations" not in short.stdout
    for g in findings.groups:
        assert g.key in full.stdout.replace("\n", " ") or g.key.split()[0] in full.stdout


def test_empty_window_and_missing_data_dir(data_dir: Path, tmp_path: Path) -> None:
    empty = cli("report", "--data-dir", str(data_dir), "--since", "2030-01-01")
    assert empty.returncode == 0, empty.stderr
    assert "no crash from 2030-01-01" in empty.stdout and len(empty.stdout.splitlines()) == 1
    as_json = cli("report", "--data-dir", str(data_dir), "--since", "2030-01-01", "-f", "json")
    # the note on stderr, the empty window's findings on stdout (`| jq .window.crashes`)
    assert as_json.returncode == 0 and "no crash" in as_json.stderr
    window = json.loads(as_json.stdout)["window"]
    assert window["crashes"] == 0 and window["since"] == "2030-01-01T00:00:00Z"
    assert window["until"] >= window["since"]
    missing = cli("report", "--data-dir", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "no coreepi store here" in missing.stderr and missing.stdout == ""
    env = cli("report", env={"COREEPI_DATA_DIR": str(tmp_path / "nope")})
    assert env.returncode == 2 and str(tmp_path / "nope") in env.stderr


def test_pager_on_a_terminal(data_dir: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged"
    out = in_pty(["report", "--data-dir", str(data_dir)], cols=80,
                  env={"PAGER": f"tee {paged}"})
    assert paged.exists(), out
    text = paged.read_text()
    assert "h-017" in text and "\x1b[" in text  # colours through the pager (less -R)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert max(len(line) for line in plain.splitlines()) <= 80
    none = tmp_path / "none"
    in_pty(["report", "--data-dir", str(data_dir), "--no-pager"], cols=80,
            env={"PAGER": f"tee {none}"})
    assert not none.exists()
