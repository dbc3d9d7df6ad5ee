"""Every node answers `--help` with what it does and how to start it, without starting."""

import subprocess
import sys

import pytest

from egomimic_nodes.spin import wants_help


def installed_nodes() -> list[str]:
    """The node executables egomimic_nodes installs (its setup.py NODES): each must answer --help."""
    import ast
    from pathlib import Path

    setup = Path(__file__).resolve().parents[3] / "ros2_ws" / "src" / "egomimic_nodes" / "setup.py"
    tree = ast.parse(setup.read_text())
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "NODES"]
    return ast.literal_eval(value)


NODES = installed_nodes()


@pytest.mark.parametrize("node", NODES)
def test_node_help_explains_and_exits(node):
    out = subprocess.run(
        [sys.executable, "-m", f"egomimic_nodes.{node}", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert f"usage: python -m egomimic_nodes.{node}" in out.stdout
    assert len(out.stdout.splitlines()) > 8, "the module docstring (topics, behaviour) is part of the help"


PARAMETERS_SHOWN = {
    "gate_node": [
        "workspace_left_min_m (tuple[float, float, float], default [-0.1, -0.6, -0.2])",
        "watchdog_rate_hz (float",
    ],
    "driver_node": [
        "rate_hz (float, default 100.0, range [1.0, 500.0])",
        "gripper_open_m (float | None, default unset)",
        "arx5.kp (",
        "sim.",
    ],
    "camera_node": ["inject_fault (str, default '', settable at runtime)", "<cam>.serial (str"],
    "policy_node": ["executor.cadence (str", "remote.timeout_s (", "scripted.chunk_length (int"],
    "bag_node": ["bag_dir (str, default 'out/bags')", "images (bool, default False)", "flush_period_s (float"],
    "recorder_node": [
        "task_name (str, default 'unlabeled', settable at runtime)",
        "min_free_mb (float",
        "sync.hold_back_s (",
    ],
}


@pytest.mark.parametrize("node", sorted(PARAMETERS_SHOWN))
def test_node_help_lists_every_parameter_with_default_range_and_meaning(node):
    """The parameters come from the node's config dataclasses: the help cannot drift from them."""
    out = subprocess.run(
        [sys.executable, "-m", f"egomimic_nodes.{node}", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    listed = out.stdout.split("\nparameters:\n", 1)[1]
    for entry in PARAMETERS_SHOWN[node]:
        assert entry in listed, f"{entry!r} not in the help's parameter list"
    assert "executor.rate_hz" not in listed and "remote.address" not in listed, "fields set from others are not listed"


def test_help_is_only_ours_before_ros_args():
    assert wants_help(["x", "--help"]) and wants_help(["x", "-h", "--ros-args", "-p", "a:=1"])
    assert not wants_help(["x", "--ros-args", "-p", "help:=--help"])
