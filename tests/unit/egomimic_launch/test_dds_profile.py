"""The shipped Fast DDS profile keeps traffic on this machine: no builtin transports, UDP only on
the loopback interface, shared memory with the sizes the comments state, no type propagation;
and every run's environment points at it with discovery LOCALHOST."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from egomimic_launch.environment import FASTDDS_PROFILE, ros_environment

NS = {"d": "http://www.eprosima.com"}


def test_the_profile_allows_udp_on_loopback_only_and_no_builtin_transports():
    root = ET.parse(FASTDDS_PROFILE).getroot()
    transports = {
        t.findtext("d:transport_id", namespaces=NS): t for t in root.iterfind(".//d:transport_descriptor", NS)
    }
    udp = [t for t in transports.values() if t.findtext("d:type", namespaces=NS) == "UDPv4"]
    assert len(udp) == 1
    assert [i.get("name") for i in udp[0].iterfind("d:interfaces/d:allowlist/d:interface", NS)] == ["lo"]
    shm = next(t for t in transports.values() if t.findtext("d:type", namespaces=NS) == "SHM")
    assert int(shm.findtext("d:segment_size", namespaces=NS)) == 8 * 2**20
    assert int(shm.findtext("d:port_queue_capacity", namespaces=NS)) == 2048
    # the port health check off for any run: an opener slept timeout/3 in its send lock (the XML says why)
    assert int(shm.findtext("d:healthy_check_timeout_ms", namespaces=NS)) == 2**32 - 1
    participant = root.find(".//d:participant[@is_default_profile='true']", NS)
    assert participant.findtext("d:rtps/d:useBuiltinTransports", namespaces=NS) == "false"
    used = [t.text for t in participant.iterfind("d:rtps/d:userTransports/d:transport_id", NS)]
    assert sorted(used) == sorted(transports)


def test_the_profile_keeps_types_out_of_discovery():
    """No TypeLookup service traffic (its reply thread crashed a driver, fc87; a lost reply leaves
    an endpoint unmatched): types registered locally, matched by name."""
    root = ET.parse(FASTDDS_PROFILE).getroot()
    participant = root.find(".//d:participant[@is_default_profile='true']", NS)
    props = {
        p.findtext("d:name", namespaces=NS): p.findtext("d:value", namespaces=NS)
        for p in participant.iterfind("d:rtps/d:propertiesPolicy/d:properties/d:property", NS)
    }
    assert props.get("fastdds.type_propagation") == "registration_only", props


def test_every_run_gets_localhost_discovery_and_the_profile_unless_set():
    env = ros_environment({})
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert env["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE)
    assert ros_environment({"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"})["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"
