"""The graph definition (launch arguments -> nodes) and the run statistics."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from egomimic_bringup.graph import LaunchArgumentError, build_graph
from egomimic_launch.process import node_command
from egomimic_launch.stats import LATENCY_BIN_S, RECENT_S, StreamAccumulator, tracking_stats
from egomimic_nodes.cpus import parse_cpu_list


def test_default_graph_is_the_sim_loop_in_dependency_order():
    graph = build_graph({})
    names = [n.name for n in graph.nodes]
    assert names == ["driver_left", "driver_right", "frames", "cameras", "safety_gate", "policy"]
    assert graph.auto_arm and graph.namespace == "eva"
    assert all(n.lifecycle for n in graph.nodes if n.name.startswith("driver"))


def test_an_external_camera_driver_replaces_the_camera_node_and_the_gate_reads_its_stamps():
    graph = build_graph({"camera_backend": "external"})
    names = [n.name for n in graph.nodes]
    assert not any(n.startswith("camera") for n in names), names
    gate = next(n for n in graph.nodes if n.name == "safety_gate")
    assert gate.parameters["camera_liveness"] == "image_stamps"
    assert build_graph({}).nodes[4].parameters["camera_liveness"] == "health_reports"
    with pytest.raises(LaunchArgumentError, match="synthetic"):
        build_graph({"camera_backend": "external", "task_seed": "3"})


def test_viz_adds_tf_and_markers_off_the_control_path_before_arming():
    graph = build_graph({"viz": "true", "record": "true"})
    names = [n.name for n in graph.nodes]
    # before the gate (arming waits for their discovery to settle), then the recorder
    assert names[names.index("safety_gate") - 3 : names.index("safety_gate")] == ["robot_state", "monitor", "recorder"]
    assert graph.stop_order()[0].name == "recorder"
    for name in ("robot_state", "monitor"):
        node = next(n for n in graph.nodes if n.name == name)
        assert not node.required and node.priority == "" and node.cpus == "", f"{name} is off the control path"
    rs = next(n for n in graph.nodes if n.name == "robot_state")
    assert Path(rs.parameters["urdf_path"]).is_file()


def test_web_adds_the_web_view_and_what_rviz_shows_off_the_control_path():
    graph = build_graph({"web": "true", "web_port": "9000", "web_host": "0.0.0.0"})
    names = [n.name for n in graph.nodes]
    assert names[names.index("safety_gate") - 3 : names.index("safety_gate")] == ["robot_state", "monitor", "webview"]
    web = graph.nodes[names.index("webview")]
    assert web.module == "egomimic_nodes.webview_node" and web.parameters == {"host": "0.0.0.0", "port": 9000}
    assert not web.required and web.priority == "" and web.cpus == "", "the web view is off the control path"
    for bad in ("http", "-1", "70000", ""):
        with pytest.raises(LaunchArgumentError, match="web_port"):
            build_graph({"web": "true", "web_port": bad})


def test_arx5_backend_does_not_auto_arm_and_policy_none_drops_the_node():
    graph = build_graph({"backend": "arx5", "policy": "none"})
    assert not graph.auto_arm
    assert "policy" not in [n.name for n in graph.nodes]


def test_record_starts_the_recorder_before_arming_and_stops_it_first(tmp_path, monkeypatch):
    """Nothing starts up while the gate is ARMED but the policy (its first command is the one
    checked against the start pose); the recorder still stops first, so its episode ends while
    every stream is live."""
    monkeypatch.chdir(tmp_path)
    graph = build_graph({"record": "true", "record_dir": "eps", "task_name": "fold_towel"})
    names = [n.name for n in graph.nodes]
    assert names[-3:] == ["recorder", "safety_gate", "policy"]
    stop = [n.name for n in graph.stop_order()]
    assert stop == ["recorder", "policy", "safety_gate", "cameras", "frames", "driver_right", "driver_left"]
    rec = graph.nodes[names.index("recorder")]
    assert rec.name == "recorder" and rec.module == "egomimic_nodes.recorder_node" and rec.stop_first
    assert not rec.required and rec.priority == "stack", "a dead recorder must not stop the arms"
    cams = graph.nodes[names.index("cameras")]
    assert cams.priority == "nice", "the gate requires fresh frames: the cameras are in the control tier"
    assert rec.parameters == {
        "auto_start": True,
        "image_transport": "compressed",
        "record_dir": str(tmp_path / "eps"),
        "task_name": "fold_towel",
        "task_description": "",
    }
    assert build_graph({"record_dir": "eps"}).args["record_dir"] == str(tmp_path / "eps")
    assert "recorder" not in [n.name for n in build_graph({}).nodes], "record defaults to false"


def test_record_has_the_cameras_encode_each_frame_once_at_the_episode_quality():
    """record:=true: the cameras we start publish the episode's JPEGs and the recorder stores them;
    with cameras of the lab's own (external) the recorder takes image_raw and encodes itself."""
    from egomimic_data.recording_config import RecorderConfig

    nodes = {n.name: n for n in build_graph({"record": "true"}).nodes}
    assert nodes["cameras"].parameters["publish_compressed"] is True
    assert nodes["cameras"].parameters["jpeg_quality"] == RecorderConfig().jpeg_quality
    assert "publish_compressed" not in {n.name: n for n in build_graph({}).nodes}["cameras"].parameters
    external = {n.name: n for n in build_graph({"record": "true", "camera_backend": "external"}).nodes}
    assert "cameras" not in external and external["recorder"].parameters["image_transport"] == "raw"
    web = {n.name: n for n in build_graph({"record": "true", "web": "true"}).nodes}["webview"]
    assert web.parameters["image_transport"] == "compressed", "the web view passes the cameras' JPEGs through"
    assert "image_transport" not in {n.name: n for n in build_graph({"web": "true"}).nodes}["webview"].parameters


@pytest.mark.parametrize(
    "args",
    [
        {"record": "yes"},
        {"task_name": " "},
        {"backend": "robot"},
        {"nope": "1"},
        {"params_file": "/does/not/exist.yaml"},
        {"inject_latency_ms": "fast"},
        {"config_sha256": "d71510d2"},  # a prefix is not a pin
        {"task_seed": "one"},
        {"task_seed": "-2"},
        {"task_seed": "3", "backend": "arx5"},  # the box exists only in the synthetic images
        {"inject_latency_ms": "-5"},  # was accepted, then failed 15 s later inside the node
        {"namespace": ""},  # was a traceback
        {"namespace": "eva-1"},  # every node failed, the reason only in their logs
        {"namespace": "1eva"},
    ],
)
def test_bad_launch_arguments_are_refused(args):
    with pytest.raises(LaunchArgumentError):
        build_graph(args)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["namespace:="], "namespace:=''"),
        (["--kill-after", "frames:abc"], "'abc' is not a number"),  # was a traceback after a 14 s start-up
        (["--kill-after", "framez:3"], "no node 'framez'"),
        (["--duration", "-5"], "--duration -5"),  # was accepted
        (["--duration", "5", "--duration-from", "armed"], "needs --duration S and --summary"),  # nothing sees ARMED
        (["inject_latency_ms:=-5"], "inject_latency_ms:=-5"),
        (["--run-dir", "/dev/null/run"], "--run-dir '/dev/null/run': cannot create it"),
        (["security:=true"], "security:=true: "),  # pip wheels: no DDS Security plugins (a ROS install: keystore)
    ],
)
def test_bad_launcher_input_is_one_line_and_exit_2_before_anything_starts(argv, says):
    out = subprocess.run(
        [sys.executable, "-m", "egomimic_launch.cli", "eva_bimanual.launch.py", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, ROS_DOMAIN_ID="231"),
    )
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert "[launch]" not in out.stdout, "nothing started"


def test_a_launcher_bug_is_one_line_and_exit_1_and_debug_prints_its_traceback(monkeypatch, capsys):
    from egomimic_launch import cli

    def broken(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "load_graph", broken)
    assert cli.main(["eva_bimanual.launch.py"]) == cli.EXIT_INTERNAL
    assert capsys.readouterr().err.strip().splitlines() == [
        "egomimic-launch: internal error: RuntimeError: boom (--debug prints the traceback)"
    ]
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["eva_bimanual.launch.py", "--debug"])


def test_config_pin_reaches_the_policy_node_normalized():
    pin = "AB" * 32
    spec = next(n for n in build_graph({"config_sha256": pin}).nodes if n.name == "policy")
    assert spec.parameters["config_sha256"] == pin.lower()
    for args in ({"policy_sha256": pin}, {"policy_sha256": pin, "config_sha256": pin.lower()}):
        spec = next(n for n in build_graph(args).nodes if n.name == "policy")
        assert spec.parameters["config_sha256"] == pin.lower(), "policy_sha256 is the contract's name of the pin"
    with pytest.raises(LaunchArgumentError, match="two different pins"):
        build_graph({"policy_sha256": pin, "config_sha256": "0" * 64})
    assert next(n for n in build_graph({}).nodes if n.name == "policy").parameters["allow_cpu_policy"] is False
    spec = next(n for n in build_graph({"allow_cpu_policy": "true"}).nodes if n.name == "policy")
    assert spec.parameters["allow_cpu_policy"] is True


def test_task_seed_reaches_the_cameras_and_the_expert_and_expert_alone_takes_seed_0():
    def params(graph, name):
        return next(n for n in graph.nodes if n.name == name).parameters

    graph = build_graph({"task_seed": "7", "policy": "expert"})
    assert params(graph, "cameras")["task_seed"] == 7 and params(graph, "policy")["expert.task_seed"] == 7
    graph = build_graph({"policy": "expert"})
    assert graph.args["task_seed"] == "0" and params(graph, "cameras")["task_seed"] == 0
    plain = build_graph({})
    assert "task_seed" not in params(plain, "cameras") and "expert.task_seed" not in params(plain, "policy")


def test_node_command_runs_module_with_ros_args(tmp_path):
    spec = build_graph({"namespace": "robot2"}).nodes[0]
    params = spec.write_launch_params(tmp_path)
    cmd = node_command(spec, params)
    assert cmd[1:3] == ["-m", "egomimic_nodes.driver_node"]
    assert "__ns:=/robot2" in cmd and "__node:=driver_left" in cmd
    assert cmd[-1] == str(params) and "/**/driver_left" in params.read_text(), "no params_file: launch arguments last"


def test_the_operators_params_file_is_applied_last(tmp_path):
    """Deployment YAML, then launch arguments, then params_file: rclpy's own parsing of the
    command line the launcher builds gives the params_file's value, over a launch argument."""
    import rclpy
    from rclpy.node import Node

    mine = tmp_path / "mine.yaml"
    # the usual wildcard key, as in the deployment YAML (an exact /eva/policy key wins anyway)
    mine.write_text("/**/policy:\n  ros__parameters:\n    inject_latency_ms: 7.0\n    rate_hz: 15.0\n")
    spec = next(
        n for n in build_graph({"params_file": str(mine), "inject_latency_ms": "3"}).nodes if n.name == "policy"
    )
    assert spec.parameters["inject_latency_ms"] == 3.0 and spec.override_files == (str(mine),)
    cmd = node_command(spec, spec.write_launch_params(tmp_path))
    files = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--params-file"]
    assert files[0].endswith("eva_sim.yaml") and files[-1] == str(mine)
    ctx = rclpy.Context()
    rclpy.init(args=cmd[cmd.index("--ros-args") :], context=ctx, domain_id=0)
    try:
        node = Node("policy", namespace="/eva", context=ctx, start_parameter_services=False)
        assert node.declare_parameter("inject_latency_ms", 0.0).value == 7.0, "params_file beats the launch argument"
        assert node.declare_parameter("rate_hz", 30.0).value == 15.0, "params_file beats the deployment YAML"
        node.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)


HALF_BIN_MS = LATENCY_BIN_S / 2 * 1e3 + 1e-9
"""A percentile read from the histogram is the middle of its bin."""


def accumulate(t, window, latency=0.002, sources=None):
    acc = StreamAccumulator("x", 100.0)
    acc.set_window(*window)
    for k, x in enumerate(t):
        acc.add(x, latency, None if sources is None else sources[k])
    return acc.stats()


def test_stream_stats_use_the_steady_window():
    t = list(np.arange(0, 10, 0.01))
    s = accumulate(t, (2.0, 8.0))
    assert (
        abs(s.rate_hz - 100.0) < 0.5
        and abs(s.latency_p50_ms - 2.0) <= HALF_BIN_MS
        and abs(s.latency_p99_ms - 2.0) <= HALF_BIN_MS
    )
    assert s.count == sum(1 for x in t if 2.0 <= x <= 8.0)
    assert abs(s.max_gap_s - 0.01) < 1e-9


def test_stream_stats_report_the_worst_gap_inside_the_window():
    t = [k * 0.01 for k in range(300)] + [3.5 + k * 0.01 for k in range(300)]  # 0.51 s silent at 2.99 s
    assert abs(accumulate(t, (1.0, 5.0)).max_gap_s - 0.51) < 1e-9
    assert accumulate(t, (4.0, 5.0)).max_gap_s < 0.0101


def test_publication_gaps_are_told_apart_from_arrival_gaps():
    """A reader that was itself late sees an arrival gap that the producer never made."""
    sources = [k / 30 for k in range(300)]
    arrivals = [x + (0.08 if k == 150 else 0.0) for k, x in enumerate(sources)]  # one arrival 80 ms late
    s = accumulate(arrivals, (0.0, 100.0), sources=sources)
    assert abs(s.max_gap_s - (1 / 30 + 0.08)) < 1e-9 and abs(s.max_source_gap_s - 1 / 30) < 1e-9


def test_the_worst_publication_gap_says_when_it_ended():
    """So that a soak can line one stream's worst gap up with the others' (the machine stalled,
    or one producer did)."""
    sources = [k / 30 for k in range(300)]
    sources = sources[:200] + [x + 0.05 for x in sources[200:]]  # the producer 50 ms late once
    s = accumulate(sources, (0.0, 100.0), sources=sources)
    assert abs(s.max_source_gap_s - (1 / 30 + 0.05)) < 1e-9
    assert s.max_source_gap_end_s == sources[200]


def test_a_publication_the_observer_missed_is_no_gap_of_the_writer():
    """A writer on time whose sample never reached this observer: its sequence numbers say so
    (taken.SequenceGaps); the gap around it is counted as missed, not as the writer's."""
    sources = [k / 30 for k in range(300)]
    acc = StreamAccumulator("x", 30.0)
    for k, x in enumerate(sources):
        if k != 150:  # publication 150 never arrived
            acc.add(x + 0.002, 0.002, x, missed=1 if k == 151 else 0)
    s = acc.stats()
    assert s.missed == 1
    assert abs(s.max_source_gap_s - 1 / 30) < 1e-9  # not 2/30
    assert abs(s.max_gap_s - 2 / 30) < 1e-9  # the arrivals did have that gap
    late = accumulate(sources[:150] + [x + 0.03 for x in sources[150:]], (0.0, 100.0))
    assert late.missed == 0  # a late writer without a sequence gap is the writer's gap


def test_a_moment_tells_a_stalled_writer_from_a_late_path():
    """The look back at the second before a HOLD: by the writer's clock, a stream whose writer
    stopped shows the silence; one written on time but delivered late shows neither."""
    acc = StreamAccumulator("x", 30.0)
    stamps = [k / 30 for k in range(90)]  # 3 s at 30 Hz, the header stamps
    sources = [1.92 if 1.5 <= x < 1.92 else x + 0.003 for x in stamps]  # the writer stopped 1.5 -> 1.92 s
    for stamp, source in zip(stamps, sources):
        arrival = source + 0.25  # delivered 250 ms after writing, whatever the writer did
        acc.add(arrival, arrival - stamp, source)
    m = acc.moment(1.0, 2.0)
    assert m.count == sum(1 for x in sources if 1.0 <= x <= 2.0)
    assert abs(m.write_latency_max_s - (1.92 - 1.5)) < 1e-9  # the first one it held
    assert abs(m.max_gap_s - (1.92 - (44 / 30 + 0.003))) < 1e-9  # silent from the last on time
    calm = acc.moment(0.2, 1.2)
    assert abs(calm.write_latency_max_s - 0.003) < 1e-9 and calm.max_gap_s < 1 / 30 + 1e-9


def test_a_moment_without_publications_is_silent_throughout():
    acc = StreamAccumulator("x", 30.0)
    acc.add(1.0, 0.01, None)  # no source timestamp: not judged by the writer's clock
    acc.add(1.1, 0.01, 1.09)
    m = acc.moment(1.5, 2.5)
    assert m.count == 0 and m.max_gap_s == 1.0 and m.write_latency_max_s != m.write_latency_max_s


def test_latency_percentiles_match_numpy_to_the_bin():
    rng = np.random.default_rng(0)
    lat = rng.gamma(2.0, 0.004, 5000) - 0.003  # some negative: a stamp for a tick ahead
    acc = StreamAccumulator("x", 100.0)
    for k, x in enumerate(lat):
        acc.add(k * 0.01, float(x))
    for q in (50, 99):
        assert abs(acc.latency_percentile_ms(q) - np.percentile(lat, q) * 1e3) <= 2 * HALF_BIN_MS


def test_stream_accumulator_memory_is_bounded():
    acc = StreamAccumulator("x", 100.0)
    acc.set_window(0.0)
    for k in range(100_000):  # 1000 s at 100 Hz
        acc.add(k * 0.01, 0.002, k * 0.01)
    assert len(acc.recent) <= RECENT_S * 100 + 1 and acc.count == 100_000
    assert abs(acc.recent_rate(999.99, 2.0) - 100.0) <= 0.5


def test_tracking_finds_the_lag():
    t = np.arange(0, 10, 1 / 30)
    cmd = np.column_stack([0.05 * np.sin(t), np.zeros_like(t), np.zeros_like(t)])
    tm = np.arange(0, 10, 0.01)
    meas = np.column_stack([0.05 * np.sin(tm - 0.2), np.zeros_like(tm), np.zeros_like(tm)])
    tr = tracking_stats("left", t, cmd, tm, meas)
    assert abs(tr.lag_s - 0.2) < 0.011 and tr.rms_error_m < 1e-3


def test_cpu_lists_parse_like_linux_and_bad_ones_say_why():
    assert parse_cpu_list("0") == {0} and parse_cpu_list("0,2-3") == {0, 2, 3}
    assert parse_cpu_list("2-3,0") == {0, 2, 3}
    for bad, why in [
        ("", "bad entry"),
        ("a", "bad entry"),
        ("3-1", "backwards"),
        ("-1", "bad entry"),
        ("1,", "bad entry"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_cpu_list(bad)


def test_control_and_stack_cpus_pin_their_tiers_and_offline_cpus_are_refused():
    graph = build_graph({"control_cpus": "0", "stack_cpus": "0-0"})
    tiers = {n.name: n.cpus for n in graph.nodes}
    assert tiers == {
        "driver_left": "0",
        "driver_right": "0",
        "frames": "0",
        "safety_gate": "0",
        "cameras": "0-0",
        "policy": "0-0",
    }
    assert all(n.cpus == "" for n in build_graph({}).nodes), "no pinning unless asked"
    with pytest.raises(LaunchArgumentError, match="not online"):
        build_graph({"control_cpus": "4095"})
    with pytest.raises(LaunchArgumentError, match="stack_cpus"):
        build_graph({"stack_cpus": "one"})


def test_a_node_asked_for_an_offline_cpu_exits_1_before_starting():
    env = dict(os.environ, EGOMIMIC_CPUS="4095")
    out = subprocess.run(
        [sys.executable, "-m", "egomimic_nodes.frames_node", "--ros-args"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 1
    assert "[FATAL] cannot pin to CPUs '4095'" in out.stderr and "not online" in out.stderr
