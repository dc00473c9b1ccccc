"""Group rule ``hardware-phenotypes-on-hardware-attribute``: a bad CPU stepping
(a population of hosts, a crash or two each) is hardware-suspect, even though
the microcode of that population — an environment attribute — explains its
crashes as well as the CPU model does; the same association without
hardware-indicative phenotypes stays environment-triggered."""

from __future__ import annotations

from coreepi.epi import EpiConfig
from coreepi.epi.attribution import attribute_group
from coreepi.epi.facts import AssociationFacts, GroupFacts
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
