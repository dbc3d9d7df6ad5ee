"""security:=true (SROS2): one enclave per node and for the launcher, the Enforce environment, and
the checks that refuse a secured start, each in one line, before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from egomimic_bringup.graph import SECURITY_ENVIRONMENT, build_graph
from egomimic_launch import security
from egomimic_launch.process import node_command


def test_every_node_gets_its_enclave_and_the_launcher_its_own(tmp_path):
    graph = build_graph({"security": "true", "namespace": "lab_eva", "record": "true"})
    assert graph.secured and graph.security_environment() == SECURITY_ENVIRONMENT
    assert SECURITY_ENVIRONMENT == {"ROS_SECURITY_ENABLE": "true", "ROS_SECURITY_STRATEGY": "Enforce"}
    for spec in graph.nodes:
        assert spec.enclave == f"/lab_eva/{spec.name}"
        cmd = node_command(spec, tmp_path / "p.yaml")
        assert cmd[cmd.index("--enclave") + 1] == spec.enclave and cmd.index("--enclave") > cmd.index("--ros-args")
    assert graph.launcher_enclave == "/lab_eva/egomimic_launcher"
    assert graph.enclaves() == [*(f"/lab_eva/{s.name}" for s in graph.nodes), "/lab_eva/egomimic_launcher"]


def test_without_security_nothing_changes(tmp_path):
    graph = build_graph({})
    assert not graph.secured and graph.enclaves() == [] and graph.security_environment() == {}
    assert graph.launcher_enclave == ""
    assert all("--enclave" not in node_command(s, tmp_path / "p.yaml") for s in graph.nodes)
    assert security.problems(graph, {}) == []


@pytest.fixture
def library(tmp_path):
    """A stand-in libfastdds: only its bytes are judged (the builtin plugins' class id)."""

    def make(with_plugins: bool):
        path = tmp_path / ("with.so" if with_plugins else "without.so")
        path.write_bytes(b"\x7fELF" + os.urandom(4096) + (b"DDS:Auth:PKI-DH:1.0" if with_plugins else b""))
        return path

    return make


def test_a_fast_dds_without_the_security_plugins_is_refused(library):
    graph = build_graph({"security": "true"})
    (line,) = security.problems(graph, {}, library=library(False))
    assert "built without the DDS Security plugins" in line


def test_the_keystore_must_hold_every_enclave(library, tmp_path):
    graph = build_graph({"security": "true"})
    lib = library(True)
    (line,) = security.problems(graph, {}, library=lib)
    assert "set ROS_SECURITY_KEYSTORE" in line
    keystore = tmp_path / "keystore"
    keystore.mkdir()
    (line,) = security.problems(graph, {"ROS_SECURITY_KEYSTORE": str(keystore)}, library=lib)
    assert "is not a keystore" in line
    for enclave in graph.enclaves()[:-1]:  # as `ros2 security create_enclave` lays them out
        (keystore / "enclaves" / enclave.strip("/")).mkdir(parents=True)
    (line,) = security.problems(graph, {"ROS_SECURITY_KEYSTORE": str(keystore)}, library=lib)
    assert "/eva/egomimic_launcher" in line and "create_enclave" in line
    (keystore / "enclaves" / "eva" / "egomimic_launcher").mkdir()
    assert security.problems(graph, {"ROS_SECURITY_KEYSTORE": str(keystore)}, library=lib) == []


def test_this_pip_install_has_no_security_plugins_and_says_so():
    """The PyPI wheels' libfastdds (the launcher's one-line refusal is in test_graph_and_stats)."""
    lib = security.fastdds_library()
    assert lib is not None, "the venv's Fast DDS"
    if security.has_security_plugins(lib):
        pytest.skip(f"{lib} has the security plugins (a ROS install)")
    (line,) = security.problems(build_graph({"security": "true"}), {})
    assert str(lib) in line and "built without the DDS Security plugins" in line


def test_print_enclaves_lists_what_create_enclave_needs():
    out = subprocess.run(
        [sys.executable, "-m", "egomimic_launch.cli", "eva_bimanual.launch.py", "security:=true", "--print-enclaves"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == build_graph({"security": "true"}).enclaves()
