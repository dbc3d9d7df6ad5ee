"""Fast DDS's warnings counted from node logs: real lines as Fast DDS prints them (colours and
all, copied from a sim run's logs), the routine ones left out, the alarming ones picked."""

from egomimic_launch.dds_log import alarming, describe, middleware_warnings, parse

ESC = "\x1b"
BUFFER = (
    f"{ESC}[37;1m2026-12-05 05:24:29.598 {ESC}[33;1m[{ESC}[37;1mRTPS_TRANSPORT_SHM{ESC}[33;1m Warning] "
    f"{ESC}[37mBuffer is being invalidated, segment_size may be insufficient{ESC}[34;1m -> Function "
    f"{ESC}[36minvalidate_if_not_processing{ESC}[m"
)
DEPTH = (
    f"{ESC}[37;1m2026-12-05 05:24:29.362 {ESC}[33;1m[{ESC}[37;1mRTPS_QOS_CHECK{ESC}[33;1m Warning] "
    f"{ESC}[37mHISTORY DEPTH '1000' is inconsistent with max_samples_per_instance: '400'. Consistency rule: "
    f"depth <= max_samples_per_instance. Effectively using max_samples_per_instance as depth.{ESC}[34;1m -> "
    f"Function {ESC}[36mcheck_qos{ESC}[m"
)
TYPE = "2026-12-05 05:24:53.474 [PARTICIPANT Warning] Type 'rcl_interfaces::msg::dds_::Log_' is in use -> Function unregister_type"
UNHEALTHY = "2026-12-05 05:24:29.700 [RTPS_TRANSPORT_SHM Warning] Port 7413 NOT Healthy. -> Function open_port_internal"


def test_a_fast_dds_line_is_parsed_with_its_colours_stripped():
    assert parse(BUFFER) == (
        "RTPS_TRANSPORT_SHM Warning",
        "Buffer is being invalidated, segment_size may be insufficient",
    )
    assert parse("[INFO] scheduling: SCHED_FIFO") is None
    assert parse("[launch] driver_left up") is None


def test_routine_lines_are_left_out_and_ports_are_alarms(tmp_path):
    (tmp_path / "cameras.log").write_text("\n".join([DEPTH, DEPTH, BUFFER, TYPE, "[INFO] up"]) + "\n")
    (tmp_path / "safety_gate.log").write_text("\n".join([TYPE, UNHEALTHY, BUFFER]) + "\n")
    (tmp_path / "frames.log").write_text(TYPE + "\n")
    warnings = middleware_warnings(tmp_path)
    assert set(warnings) == {"cameras", "safety_gate"}, "frames printed only routine lines"
    assert warnings["cameras"] == {
        "RTPS_TRANSPORT_SHM Warning: Buffer is being invalidated, segment_size may be insufficient": 1
    }
    assert sum(warnings["safety_gate"].values()) == 2
    alarms = alarming(warnings)
    assert list(alarms) == ["safety_gate"]
    assert list(alarms["safety_gate"]) == ["RTPS_TRANSPORT_SHM Warning: Port 7413 NOT Healthy."]
    line = describe(alarms)
    assert line.startswith("safety_gate 1 (1x RTPS_TRANSPORT_SHM Warning: Port 7413 NOT Healthy.")


def test_no_logs_no_warnings(tmp_path):
    assert middleware_warnings(tmp_path / "absent") == {}


def test_the_console_leaves_out_the_routine_warnings_and_keeps_the_alarms():
    """`make run` echoed dozens of rcl's /rosout history warnings per node; they stay in the
    node's log (the launcher's counts read it), the console shows the rest."""
    from egomimic_launch.process import _routine_middleware_line

    esc = "\x1b[37;1m2026-12-05 09:58:59.443 \x1b[33;1m[\x1b[37;1m"
    routine = (
        esc + "RTPS_QOS_CHECK\x1b[33;1m Warning] \x1b[37mHISTORY DEPTH '1000' is inconsistent with x -> Function y"
    )
    alarm = esc + "RTPS_TRANSPORT_SHM\x1b[33;1m Warning] \x1b[37mPort 27167 Zombie. Reset the port -> Function z"
    assert _routine_middleware_line(routine)
    assert not _routine_middleware_line(alarm)
    assert not _routine_middleware_line("[INFO] [1796464739.45] [eva.driver_left]: active: publishing state")
