"""Small parts of capture: config errors, /proc parsers, cgroup → container,
host facts from a scratch root, load figures, token buckets."""

from __future__ import annotations

from pathlib import Path

import pytest

from coreepi.capture.config import CaptureConfig, load_config
from coreepi.capture.heartbeat import load_figures
from coreepi.capture.hostfacts import static_facts
from coreepi.capture.procinfo import container_from_cgroup, filter_environ, parse_maps
from coreepi.capture.ratelimit import take_core_tokens
from coreepi.capture.spool import Spool
from coreepi.errors import InputError

POD = "3f2a1b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b"
CID = "0123456789abcdef" * 4


@pytest.mark.parametrize("path,expected", [
    (f"/system.slice/docker-{CID}.scope", (CID, None)),
    (f"/docker/{CID}", (CID, None)),
    (f"/kubepods/burstable/pod{POD}/{CID}", (CID, POD)),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD.replace('-', '_')}"
     f".slice/cri-containerd-{CID}.scope", (CID, POD)),
    (f"/machine.slice/libpod-{CID}.scope/container", (CID, None)),
    (f"/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CID}.scope", (CID, POD)),
    ("/user.slice/user-1000.slice/session-2.scope", (None, None)),
    (None, (None, None)),
])
def test_container_from_cgroup(path: str | None, expected: tuple[str | None, str | None]) -> None:
    assert container_from_cgroup(path) == expected


def test_parsers() -> None:
    maps = parse_maps("55d0-55e0 r-xp 00001000 fd:01 12 /usr/bin/true\n"
                      "7ffc-7ffd rw-p 00000000 00:00 0 [stack]\n7000-8000 ---p 0 00:00 0\n"
                      "garbage line\n")
    assert [(m.start, m.perms, m.offset, m.path) for m in maps] == [
        (0x55D0, "r-x", 0x1000, "/usr/bin/true"), (0x7FFC, "rw-", 0, "[stack]"),
        (0x7000, "---", 0, None)]
    env = filter_environ(b"LANG=C\0PASSWORD=x\0TZ=UTC\0", ["LANG", "TZ"])
    assert env == {"LANG": "C", "TZ": "UTC"}


def test_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text("[collect]\nmax_core_byte = 5\n")
    with pytest.raises(InputError, match="unknown key 'max_core_byte'"):
        load_config(bad)
    bad.write_text("[collect]\nzstd_level = 'high'\n")
    with pytest.raises(InputError, match="must be a number"):
        load_config(bad)
    bad.write_text("not = [toml\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(InputError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    good = tmp_path / "g.toml"
    good.write_text('server_url = "http://x"\n[collect]\nexclude_signals = ["SIGQUIT", 6]\n'
                    '[host.labels]\nrack = "r1"\n')
    config = load_config(good)
    assert config.collect.exclude_signals == ["SIGQUIT", 6] and config.host.labels == {"rack": "r1"}
    assert config.collect.zstd_level == CaptureConfig().collect.zstd_level


def test_static_facts_from_scratch_root(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
        "model name\t: AMD EPYC 7763 64-Core Processor\nstepping\t: 1\nmicrocode\t: 0xa0011d1\n"
        "flags\t\t: fpu vme hypervisor\n\nprocessor\t: 1\nvendor_id\t: other\n")
    dmi = tmp_path / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    for name, value in {"bios_version": "1.2.3", "bios_date": "01/02/2024",
                        "board_name": "X13", "sys_vendor": "Amazon EC2",
                        "product_name": "m6a.large"}.items():
        (dmi / name).write_text(value + "\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("abc123\n")
    (tmp_path / "etc/os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    facts = static_facts(tmp_path)
    assert facts["cpu_model"] == "AMD EPYC 7763 64-Core Processor"
    assert (facts["cpu_family"], facts["cpu_model_number"], facts["cpu_stepping"]) == (25, 1, 1)
    assert facts["microcode"] == "0xa0011d1" and facts["bios_version"] == "1.2.3"
    assert facts["board"] == "X13" and facts["hypervisor"] == "amazon"
    assert facts["os"] == "Debian GNU/Linux 12 (bookworm)"
    assert facts["extra"]["machine_id"] == "abc123" and facts["extra"]["cpu_vendor"] == "AuthenticAMD"


def test_load_figures_from_scratch_root(tmp_path: Path) -> None:
    (tmp_path / "proc/pressure").mkdir(parents=True)
    (tmp_path / "proc/loadavg").write_text("1.50 1.00 0.50 2/300 1234\n")
    (tmp_path / "proc/uptime").write_text("12345.67 20000.00\n")
    (tmp_path / "proc/pressure/memory").write_text(
        "some avg10=2.50 avg60=1.00 avg300=0.10 total=123\nfull avg10=0.00 avg60=0.00 "
        "avg300=0.00 total=0\n")
    assert load_figures(tmp_path) == {"loadavg_1m": 1.5, "memory_pressure_some_avg10": 2.5,
                                      "uptime_seconds": 12345.67}
    (tmp_path / "proc/pressure/memory").unlink()
    assert load_figures(tmp_path)["memory_pressure_some_avg10"] is None


def test_token_bucket_refills(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    limits = CaptureConfig().rate_limit
    limits.executable_burst, limits.executable_per_hour = 2, 3600  # one token a second
    t = 1_000_000.0
    assert take_core_tokens(spool, limits, "/bin/x", t).allowed
    assert take_core_tokens(spool, limits, "/bin/x", t).allowed
    assert not take_core_tokens(spool, limits, "/bin/x", t + 0.5).allowed
    assert take_core_tokens(spool, limits, "/bin/y", t + 0.5).allowed  # per executable
    assert take_core_tokens(spool, limits, "/bin/x", t + 1.6).allowed
