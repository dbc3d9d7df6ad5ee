"""The graph definition (launch arguments -> nodes) and the run statistics."""

import numpy as np
import pytest

from egomimic_bringup.graph import LaunchArgumentError, build_graph
from egomimic_launch.process import node_command, write_params_file
from egomimic_launch.stats import stream_stats, tracking_stats


def test_default_graph_is_the_sim_loop_in_dependency_order():
    graph = build_graph({})
    names = [n.name for n in graph.nodes]
    assert names == ["driver_left", "driver_right", "frames", "cameras", "safety_gate", "policy"]
    assert graph.auto_arm and graph.namespace == "eva"
    assert all(n.lifecycle for n in graph.nodes if n.name.startswith("driver"))


def test_arx5_backend_does_not_auto_arm_and_policy_none_drops_the_node():
    graph = build_graph({"backend": "arx5", "policy": "none"})
    assert not graph.auto_arm
    assert "policy" not in [n.name for n in graph.nodes]


@pytest.mark.parametrize("args", [{"backend": "robot"}, {"nope": "1"}, {"params_file": "/does/not/exist.yaml"},
                                  {"inject_latency_ms": "fast"}])
def test_bad_launch_arguments_are_refused(args):
    with pytest.raises(LaunchArgumentError):
        build_graph(args)


def test_node_command_runs_module_with_ros_args(tmp_path):
    spec = build_graph({"namespace": "robot2"}).nodes[0]
    params = write_params_file(spec, tmp_path)
    cmd = node_command(spec, params)
    assert cmd[1:3] == ["-m", "egomimic_nodes.driver_node"]
    assert "__ns:=/robot2" in cmd and "__node:=driver_left" in cmd
    assert cmd[-1] == str(params) and "/robot2/driver_left" in params.read_text()


def test_stream_stats_uses_the_steady_window():
    t = list(np.arange(0, 10, 0.01))
    s = stream_stats("x", 100.0, t, [0.002] * len(t), (2.0, 8.0))
    assert abs(s.rate_hz - 100.0) < 0.5 and abs(s.latency_p50_ms - 2.0) < 1e-6
    assert abs(s.max_gap_s - 0.01) < 1e-9


def test_stream_stats_reports_the_worst_gap_inside_the_window():
    t = [k * 0.01 for k in range(300)] + [3.5 + k * 0.01 for k in range(300)]  # 0.51 s silent at 2.99 s
    s = stream_stats("x", 100.0, t, [0.002] * len(t), (1.0, 5.0))
    assert abs(s.max_gap_s - 0.51) < 1e-9
    assert stream_stats("x", 100.0, t, [0.002] * len(t), (4.0, 5.0)).max_gap_s < 0.0101


def test_tracking_finds_the_lag():
    t = np.arange(0, 10, 1 / 30)
    cmd = np.column_stack([0.05 * np.sin(t), np.zeros_like(t), np.zeros_like(t)])
    tm = np.arange(0, 10, 0.01)
    meas = np.column_stack([0.05 * np.sin(tm - 0.2), np.zeros_like(tm), np.zeros_like(tm)])
    tr = tracking_stats("left", t, cmd, tm, meas)
    assert abs(tr.lag_s - 0.2) < 0.011 and tr.rms_error_m < 1e-3
