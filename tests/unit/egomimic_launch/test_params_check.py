"""params_file:= checked against the graph before anything starts (egomimic_launch.params_check):
a misspelled node or key, a quoted number, a value outside its range each give one line; the
shipped deployment files pass; the gate's changed limits are listed for the log."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egomimic_bringup.graph import build_graph
from egomimic_launch import params_check

GRAPH = build_graph({})


def write(tmp_path, data) -> str:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


@pytest.mark.parametrize("overrides", [{}, {"backend": "arx5"}, {"viz": "true", "record": "true", "web": "true"}])
def test_the_shipped_deployment_files_pass(overrides):
    graph = build_graph(overrides)
    files = {f for spec in graph.nodes for f in spec.params_files}
    assert files and all(params_check.check(f, graph) == [] for f in files)


def test_what_the_nodes_declare_passes(tmp_path):
    good = {
        "/**/safety_gate": {"ros__parameters": {"max_translation_step_m": 0.05, "use_sim_time": False}},
        "/eva/driver_left": {"ros__parameters": {"rate_hz": 100}},  # an integer for a float is fine
        "/**/policy": {"ros__parameters": {"executor": {"query_every_n_ticks": 15}}},  # nested = dotted
        "cameras": {"ros__parameters": {"front_1": {"device": "/dev/video4"}}},  # per-camera keys
        "/**": {"ros__parameters": {"use_sim_time": False}},
    }
    assert params_check.check(write(tmp_path, good), build_graph({})) == []


@pytest.mark.parametrize(
    "data, says",
    [
        (
            {"/**/safety_gate": {"ros__parameters": {"max_translaton_step_m": 0.05}}},
            "no parameter 'max_translaton_step_m' on safety_gate (did you mean max_translation_step_m",
        ),
        ({"/**/driver_leftt": {"ros__parameters": {"rate_hz": 100.0}}}, "/**/driver_leftt matches no node"),
        ({"/**/driver_left": {"ros__parameters": {"rate_hz": "50.0"}}}, "rate_hz: '50.0' is text, expected a number"),
        (
            {"/**/safety_gate": {"ros__parameters": {"command_timeout_s": 1000.0}}},
            "command_timeout_s: 1000.0 is outside",
        ),
        ({"/**/safety_gate": {"rate_hz": 100.0}}, "expected {ros__parameters"),
        ("- just\n- a list\n", "expected a map of node selectors"),
        ("/**/safety_gate: {ros__parameters: {a: [1,\n", "not readable YAML"),
    ],
)
def test_each_mistake_is_one_line(tmp_path, data, says):
    problems = params_check.check(write(tmp_path, data), build_graph({}))
    assert len(problems) == 1 and says in problems[0], problems


def test_the_gates_changed_limits_are_listed(tmp_path):
    path = write(tmp_path, {"/**/safety_gate": {"ros__parameters": {"max_translation_step_m": 0.05}}})
    assert params_check.differing_limits(path, build_graph({})) == ["max_translation_step_m 0.08 -> 0.05"]


def test_unsafe_limits_lets_a_gate_limit_above_its_maximum_through_and_lists_it(tmp_path):
    """Issue 18: a weakened gate limit is refused unless unsafe_limits:=true, which lifts only the
    gate's upper bounds (lower bounds, types and other nodes' ranges still hold) and never comes
    from a file."""
    weak = write(tmp_path, {"/**/safety_gate": {"ros__parameters": {"command_timeout_s": 1000.0}}})
    [refused] = params_check.check(weak, build_graph({}))
    assert "command_timeout_s: 1000.0 is outside [0.0, 10.0]" in refused
    unsafe = build_graph({"unsafe_limits": "true"})
    assert unsafe.unsafe_limits and params_check.check(weak, unsafe) == []
    assert params_check.unsafe_values(weak, unsafe) == ["command_timeout_s 1000.0 (safe maximum 10.0)"]
    gate = next(n for n in unsafe.nodes if n.name == "safety_gate")
    assert gate.parameters["unsafe_limits"] is True
    for data, says in [
        ({"/**/safety_gate": {"ros__parameters": {"command_timeout_s": -1.0}}}, "is outside"),
        ({"/**/safety_gate": {"ros__parameters": {"command_timeout_s": "1000"}}}, "command_timeout_s"),
        ({"/**/driver_left": {"ros__parameters": {"rate_hz": 5000.0}}}, "is outside"),
        ({"/**/safety_gate": {"ros__parameters": {"unsafe_limits": True}}}, "launch argument unsafe_limits:=true"),
        ({"/**/safety_gate": {"ros__parameters": {"command_timeout_s": float("inf")}}}, "is outside"),
    ]:
        [problem] = params_check.check(write(tmp_path, data), unsafe)
        assert says in problem, problem


def test_a_key_every_node_takes_is_checked_against_each(tmp_path):
    """`/**` reaches the drivers first (their command_timeout_s has no range) and the gate too:
    the gate's range still refuses 50 s before anything starts."""
    path = write(tmp_path, {"/**": {"ros__parameters": {"command_timeout_s": 50.0}}})
    assert params_check.check(path, build_graph({})) == [
        f"params_file {path}: /**: command_timeout_s: 50.0 is outside [0.0, 10.0]"
    ]


def test_the_launcher_refuses_before_starting_anything(tmp_path):
    path = write(tmp_path, {"/**/safety_gate": {"ros__parameters": {"max_translaton_step_m": 0.05}}})
    out = subprocess.run(
        [sys.executable, "-m", "egomimic_launch.cli", "eva_bimanual.launch.py", f"params_file:={path}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, ROS_DOMAIN_ID="231"),
    )
    assert out.returncode == 2 and "[launch]" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "max_translaton_step_m" in lines[0] and "Traceback" not in out.stderr


_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=12), st.binary(max_size=8)
)
_trees = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)
_names = st.sampled_from(["/**/safety_gate", "/**/policy", "cameras", "/**", "/eva/*", "x", "/**/driver_left"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        _trees,
        st.dictionaries(_names, st.fixed_dictionaries({"ros__parameters": _trees}), max_size=3),
        st.dictionaries(
            _names,
            st.fixed_dictionaries(
                {
                    "ros__parameters": st.dictionaries(
                        st.sampled_from(["rate_hz", "max_translation_step_m", "executor", "front_1"]), _trees
                    )
                }
            ),
            max_size=3,
        ),
    )
)
def test_fuzzed_parameter_files_get_lines_never_a_crash(tmp_path, data):
    try:
        text = yaml.safe_dump(data)
    except yaml.YAMLError:
        return
    problems = params_check.check(write(tmp_path, text), GRAPH)
    assert isinstance(problems, list) and all(isinstance(p, str) and "\n" not in p for p in problems)
