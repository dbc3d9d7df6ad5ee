"""Every node answers `--help` with what it does and how to start it, without starting."""

import subprocess
import sys

import pytest

from egomimic_nodes.spin import wants_help

NODES = ["driver_node", "frames_node", "camera_node", "gate_node", "policy_node"]


@pytest.mark.parametrize("node", NODES)
def test_node_help_explains_and_exits(node):
    out = subprocess.run(
        [sys.executable, "-m", f"egomimic_nodes.{node}", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert f"usage: python -m egomimic_nodes.{node}" in out.stdout
    assert len(out.stdout.splitlines()) > 8, "the module docstring (topics, behaviour) is part of the help"


def test_help_is_only_ours_before_ros_args():
    assert wants_help(["x", "--help"]) and wants_help(["x", "-h", "--ros-args", "-p", "a:=1"])
    assert not wants_help(["x", "--ros-args", "-p", "help:=--help"])
