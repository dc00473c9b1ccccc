"""Group rule ``hardware-phenotypes-on-hardware-attribute``: a bad CPU stepping
(a population of hosts, a crash or two each) is hardware-suspect, even though
the microcode of that population — an environment attribute — explains its
crashes as well as the CPU model does; the same association without
hardware-indicative phenotypes stays environment-triggered."""

from __future__ import annotations

from coreepi.epi import EpiConfig
from coreepi.epi.attribution import attribute_group
from coreepi.epi.facts import AssociationFacts, GroupFacts, HostSigns
from coreepi.reporting.phrases import evidence_text


def assoc(attribute: str, cls: str, value: str, p: float) -> AssociationFacts:
    return AssociationFacts(attribute=attribute, attribute_class=cls, value=value, crashes=20,
                            share_of_group=1.0, irr=None, irr_status="unbounded",
                            irr_lower=8.0, irr_upper=None,
                            p_value=p, q_value=p * 10)


def stepping_group(hardware_crashes: int) -> GroupFacts:
    return GroupFacts(
        kind="signature", key="stack-misaligned | kvstore", crashes=20, hosts=8,
        hardware_phenotype_crashes=hardware_crashes,
        hardware_phenotypes=(("stack-misaligned", hardware_crashes),) if hardware_crashes else (),
        top_host="h-100", top_host_crashes=5, top_host_expected=0.1, top_host_p=8e-8,
        top_host_signs=None,
        associations=(assoc("microcode", "environment", "0xd000390", 1e-22),
                      assoc("cpu_model", "hardware", "Intel Xeon Gold 6338", 3e-9)),
    )


def test_bad_stepping_is_hardware_suspect() -> None:
    att = attribute_group(stepping_group(20), EpiConfig())
    assert att.verdict == "hardware-suspect"
    assert att.rule == "hardware-phenotypes-on-hardware-attribute"
    lead = evidence_text(att.evidence[0])
    assert "cpu_model=Intel Xeon Gold 6338" in lead and lead.startswith("100% of its crashes")
    assert "stack-misaligned" in evidence_text(att.evidence[1])
    # the microcode association is still in the evidence, for the operator to weigh
    assert any("microcode=0xd000390" in evidence_text(e) for e in att.evidence)


def test_same_association_without_hardware_phenotypes_stays_environment() -> None:
    att = attribute_group(stepping_group(0), EpiConfig())
    assert att.verdict == "environment-triggered"
    assert att.rule == "environment-association"
    assert "microcode=0xd000390" in evidence_text(att.evidence[0])


# --- rule rest-too-few-beside-hardware-host ------------------------------------------------
# The demo's bad-CPU host h-086 in a one-day window: 3 of a phenotype group's 6 crashes, not
# improbable enough to be "concentrated" (p 4.7e-6), and the group had been called software
# from the 3 crashes on 3 other hosts (a fresh user's report).


def bad_cpu_signs() -> HostSigns:
    return HostSigns(
        host_id="h-086", crashes=3, expected=0.084, sir=35.7, sir_status="finite",
        sir_lower=7.36, sir_upper=104.0, p_value=9.9e-5, distinct_signatures=1,
        expected_distinct=1.0, private_signatures=0, hardware_phenotype_crashes=3,
        hardware_phenotypes=(("stack-misaligned", 3),), hardware_events=0,
        crashes_after_hardware_event=0, telemetry_kinds=(), telemetry_example=None,
        telemetry_days=7.0, node_days=1.0,
    )


def phenotype_group(crashes: int, hosts: int, top: int, signs: HostSigns | None) -> GroupFacts:
    return GroupFacts(
        kind="phenotype", key="pc-not-executable", crashes=crashes, hosts=hosts,
        hardware_phenotype_crashes=top, hardware_phenotypes=(("stack-misaligned", top),),
        top_host="h-086", top_host_crashes=top, top_host_expected=0.031, top_host_p=4.7e-6,
        top_host_signs=signs,
    )


def test_group_half_on_a_host_with_hardware_signs_is_not_software() -> None:
    att = attribute_group(phenotype_group(6, 4, 3, bad_cpu_signs()), EpiConfig())
    assert (att.verdict, att.rule) == ("undetermined", "rest-too-few-beside-hardware-host")
    assert evidence_text(att.evidence[0]) == (
        "3 of 6 crashes on host h-086, which shows hardware signs; the other 3 crashes on "
        "3 hosts are too few to judge without it (at least 5 are needed)")
    assert any(e.kind == "hardware-phenotypes" and e.host_ids == ["h-086"] for e in att.evidence)


def test_group_that_stands_without_the_hardware_host_stays_software() -> None:
    att = attribute_group(phenotype_group(8, 7, 2, bad_cpu_signs()), EpiConfig())
    assert (att.verdict, att.rule) == ("software", "fleet-spread")


def test_top_host_without_hardware_signs_does_not_block_software() -> None:
    att = attribute_group(phenotype_group(6, 4, 3, None), EpiConfig())
    assert (att.verdict, att.rule) == ("software", "fleet-spread")
