"""The ROS 2 launch file starts what egomimic-launch starts: the same nodes in the same order, with
the same parameters, remappings and environment, the same arming and the same safe stop.

`generate_launch_description()` runs against the stand-in of launch / launch_ros
(ros_launch_standin.py: their semantics for the API surface the file uses), and its processes
are compared with egomimic_launch's own node commands (process.node_command /
process.node_environment) for the same arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from egomimic_bringup import LAUNCH_DIR
from egomimic_bringup.graph import LAUNCH_ARGUMENTS, LaunchArgumentError
from egomimic_launch.cli import load_graph
from egomimic_launch.environment import DDS_VARIABLES, ros_environment
from egomimic_launch.process import node_command, node_environment
from tests.unit.egomimic_launch import ros_launch_standin as standin

LAUNCH_FILE = LAUNCH_DIR / "eva_bimanual.launch.py"
DDS_KEYS = DDS_VARIABLES
NODE_KEYS = ("EGOMIMIC_PRIORITY", "EGOMIMIC_CPUS")
SECURITY_KEYS = ("ROS_SECURITY_ENABLE", "ROS_SECURITY_STRATEGY")


@pytest.fixture
def ros_launch():
    standin.install()
    try:
        yield standin.load_launch_file(LAUNCH_FILE)
    finally:
        standin.uninstall()


def combinations(tmp_path: Path) -> list[dict[str, str]]:
    params = tmp_path / "operator.yaml"
    params.write_text("/**/policy:\n  ros__parameters:\n    executor.query_every_n_ticks: 15\n")
    weak = tmp_path / "weak.yaml"
    weak.write_text("/**/safety_gate:\n  ros__parameters:\n    command_timeout_s: 20.0\n")
    return [
        {},
        {"backend": "arx5"},
        {"policy": "none", "realtime": "false"},
        {"record": "true", "record_dir": str(tmp_path / "episodes"), "task_name": "fold towel", "viz": "true"},
        {"policy": "expert", "task_seed": "7", "control_cpus": "0", "stack_cpus": "1", "inject_latency_ms": "20"},
        {"namespace": "lab_eva", "params_file": str(params), "auto_arm": "false", "camera_backend": "synthetic"},
        {"web": "true", "web_port": "9000", "bag": "true", "bag_dir": str(tmp_path / "bags")},
        {"security": "true", "namespace": "lab_eva"},
        {"unsafe_limits": "true", "params_file": str(weak)},
    ]


def ros_args_without_files(cmd: list[str]) -> tuple[list[str], list[str]]:
    """(the --ros-args part with parameter file paths blanked, the parameter files in order)."""
    args = cmd[cmd.index("--ros-args") :]
    files = [args[i + 1] for i, a in enumerate(args) if a == "--params-file"]
    blanked = ["<file>" if i > 0 and args[i - 1] == "--params-file" else a for i, a in enumerate(args)]
    return blanked, files


def file_contents(path: str):
    return yaml.safe_load(Path(path).read_text())


@pytest.mark.parametrize("case", range(9))
def test_the_launch_file_starts_what_egomimic_launch_starts(ros_launch, tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)  # record_dir and generated files resolve the same for both
    args = combinations(tmp_path)[case]
    env = {k: v for k, v in ros_environment().items() if k not in DDS_KEYS}  # as a fresh shell has it
    service = standin.LaunchService(args, environment=dict(env)).run(ros_launch())
    graph = load_graph("eva_bimanual.launch.py", args)

    nodes = [s for s in service.started if isinstance(s.action, standin.Node)]
    assert [s.action.node_name for s in nodes] == [spec.name for spec in graph.nodes], "same nodes, same order"
    expected_env = dict(ros_environment(dict(env)), **graph.security_environment())  # egomimic-launch adds it
    for started, spec in zip(nodes, graph.nodes, strict=True):
        theirs = node_command(spec, spec.write_launch_params(tmp_path / "egomimic_launch_params"))
        ours_args, ours_files = ros_args_without_files(started.cmd)
        their_args, their_files = ros_args_without_files(theirs)
        assert ours_args == their_args, f"{spec.name}: remappings and argument order"
        assert [file_contents(f) for f in ours_files] == [file_contents(f) for f in their_files], (
            f"{spec.name}: the same parameter files, in the same order"
        )
        assert started.cmd[0].endswith(f"/lib/egomimic_nodes/{spec.module.split('.')[1]}")
        assert isinstance(started.action, standin.LifecycleNode) == spec.lifecycle
        their_env = node_environment(spec, expected_env)
        for key in DDS_KEYS + NODE_KEYS + SECURITY_KEYS:
            assert started.env.get(key) == their_env.get(key), f"{spec.name}: {key}"
        assert started.env["EGOMIMIC_LAUNCHER_PID"].isdigit(), "nodes exit with their launcher (spin.py)"
    steps = [s for s in service.started if not isinstance(s.action, standin.Node)]
    for step in steps:  # waits and arming join with the launcher's enclave, as egomimic-launch's own client does
        assert ("--enclave" in step.cmd) == graph.secured, step.cmd
        if graph.secured:
            assert step.cmd[step.cmd.index("--enclave") + 1] == graph.launcher_enclave == "/lab_eva/egomimic_launcher"
            assert all(step.env.get(k) == v for k, v in graph.security_environment().items())
    for spec in graph.nodes:
        if spec.lifecycle:
            node = next(s.action for s in nodes if s.action.node_name == spec.name)
            assert node.state == "active", f"{spec.name} configured and activated"

    # start order with its waits: each node starts after the previous one is up; arming (when
    # auto_arm) comes after the gate and before the policy, as egomimic-launch arms at arm_after.
    sequence = service.sequence()
    expected = []
    for spec in graph.nodes:
        expected.append(spec.name)
        if not spec.lifecycle:
            expected.append("step:wait-node")
        if spec.arm_after and graph.auto_arm:
            expected.append("step:arm")
    assert sequence == expected
    assert not service.is_shutdown
    assert service.log[-1] == f"[launch] all {len(graph.nodes)} nodes up"
    unsafe = [line for line in service.log if "UNSAFE LIMITS" in line]
    if graph.unsafe_limits:  # as egomimic-launch: every value above its safe maximum, at start
        assert len(unsafe) == 1 and "command_timeout_s 20.0 (safe maximum 10.0)" in unsafe[0], service.log
    else:
        assert not unsafe


def test_every_launch_argument_is_declared_with_its_choices(ros_launch):
    description = ros_launch()
    declared = {e.name: e for e in description.entities if isinstance(e, standin.DeclareLaunchArgument)}
    assert list(declared) == [a.name for a in LAUNCH_ARGUMENTS]
    for a in LAUNCH_ARGUMENTS:
        assert declared[a.name].default_value == a.default
        assert declared[a.name].choices == (list(a.choices) if a.choices else None)


def test_the_dds_environment_is_set_unless_the_operator_set_it(ros_launch):
    service = standin.LaunchService({}, environment={"ROS_DOMAIN_ID": "77"}).run(ros_launch())
    assert service.environment["ROS_DOMAIN_ID"] == "77"
    assert service.environment["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert Path(service.environment["FASTDDS_DEFAULT_PROFILES_FILE"]).is_file()
    assert {s.env["ROS_DOMAIN_ID"] for s in service.started} == {"77"}


def test_a_value_outside_the_choices_stops_the_launch_naming_it(ros_launch):
    with pytest.raises(standin.LaunchError, match="backend"):
        standin.LaunchService({"backend": "ur5"}).run(ros_launch())
    with pytest.raises(LaunchArgumentError, match="task_seed"):
        standin.LaunchService({"task_seed": "seven"}).run(ros_launch())


def test_a_required_node_that_dies_gets_an_estop_before_the_launch_shuts_down(ros_launch):
    service = standin.LaunchService({}).run(ros_launch())
    service.kill("driver_left")
    sequence = service.sequence()
    assert sequence[-1] == "step:estop", "the gate is told to e-stop"
    estop = service.started[-1]
    assert estop.cmd[estop.cmd.index("--namespace") + 1] == "eva"
    assert "driver_left" in estop.cmd[estop.cmd.index("--reason") + 1]
    assert service.is_shutdown and "driver_left exited with code -9" in service.shutdown_reason


def test_an_estop_that_fails_still_shuts_the_launch_down(ros_launch):
    service = standin.LaunchService({}, step_exit_codes={"estop": 1}).run(ros_launch())
    service.kill("safety_gate")
    assert service.is_shutdown and "safety_gate" in service.shutdown_reason


def test_a_recorder_that_dies_does_not_stop_the_arms(ros_launch, tmp_path):
    service = standin.LaunchService({"record": "true", "record_dir": str(tmp_path)}).run(ros_launch())
    service.kill("recorder")
    assert "step:estop" not in service.sequence() and not service.is_shutdown


def test_an_orderly_stop_sends_no_estop(ros_launch):
    service = standin.LaunchService({}).run(ros_launch())
    service.shutdown()
    assert "step:estop" not in service.sequence()


def test_a_node_that_does_not_come_up_stops_the_start_with_an_estop(ros_launch):
    service = standin.LaunchService({}, step_exit_codes={"wait-node": 1}).run(ros_launch())
    assert service.sequence() == ["driver_left", "driver_right", "frames", "step:wait-node", "step:estop"]
    assert service.is_shutdown and "frames did not appear" in service.shutdown_reason


def test_a_driver_that_fails_to_configure_stops_the_start(ros_launch):
    service = standin.LaunchService({}, failing_transitions={("driver_right", "configure")}).run(ros_launch())
    assert service.sequence() == ["driver_left", "driver_right", "step:estop"]
    assert service.is_shutdown and "driver_right: configure failed" in service.shutdown_reason


def test_lifecycle_nodes_use_the_pattern_both_distributions_have(ros_launch):
    """LifecycleNode(autostart=True) is Kilted-only: the stand-in refuses it."""
    text = LAUNCH_FILE.read_text()
    assert "autostart" not in text.split('"""', 2)[2]
    standin.LaunchService({}).run(ros_launch())


def test_every_launch_argument_of_the_contract_exists():
    """docs/interfaces.md's launch-argument table (the contract) is declared, by both launchers."""
    import re

    text = (Path(__file__).resolve().parents[3] / "docs" / "interfaces.md").read_text()
    table = text[text.index("## Launch arguments") :].splitlines()[3:]
    contract = set()
    for line in table:
        if not line.startswith("|"):
            break
        contract.update(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    assert contract and contract <= {a.name for a in LAUNCH_ARGUMENTS}, sorted(contract)
