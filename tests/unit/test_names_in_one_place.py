"""Topic and service names, and the arm pair, are written once (egomimic_nodes.topics,
egomimic_hw.description): no string literal in code (docstrings aside) spells a graph name,
and no ("left", "right") tuple stands in for ARMS."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOMES = {
    REPO / "ros2_ws/src/egomimic_nodes/egomimic_nodes/topics.py",  # the names
    REPO / "tests/unit/egomimic_nodes/test_topics.py",  # checks them, spelled out independently
    Path(__file__).resolve(),  # this check's own list
}
GRAPH_NAMES = (
    "joint_states",
    "ee_pose",
    "ee_pose_dataset",
    "joint_command",
    "command/proposed",
    "policy/action",
    "policy/chunk",
    "policy/reset",
    "safety/status",
    "safety/arm",
    "safety/disarm",
    "safety/estop",
    "safety/reset",
    "recorder/status",
    "recorder/start",
    "recorder/stop",
    "image_raw",
    "camera_info",
    "health",
    "diagnostics",
    "tf",
    "tf_static",
    "robot_description",
    "viz/markers",
)
NAME = re.compile(r"(^|/)(" + "|".join(re.escape(n) for n in GRAPH_NAMES) + r")($|/)")


def python_files():
    for top in (
        "egomimic_hw",
        "egomimic_safety",
        "egomimic_policy",
        "egomimic_data",
        "launch",
        "ros2_ws",
        "bench",
        "tools",
        "tests",
    ):
        yield from (p for p in (REPO / top).rglob("*.py") if p not in HOMES)


def docstrings(tree: ast.AST) -> set[int]:
    """ids of every string that is a statement of its own (docstrings, attribute docstrings)."""
    return {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


def findings(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    skip = docstrings(tree)
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip and NAME.search(n.value):
            out.append(f"{path.relative_to(root)}:{n.lineno}: {n.value!r}")
        if (
            isinstance(n, ast.Tuple)
            and len(n.elts) == 2
            and all(isinstance(e, ast.Constant) for e in n.elts)
            and {e.value for e in n.elts} == {"left", "right"}
        ):
            out.append(f"{path.relative_to(root)}:{n.lineno}: a (left, right) tuple instead of ARMS")
    return out


def test_graph_names_and_the_arm_pair_are_written_once():
    found = [f for p in python_files() for f in findings(p)]
    assert not found, "use egomimic_nodes.topics / egomimic_hw.description.ARMS:\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""about joint_states"""\nA = "left/joint_states"\nB = ("left", "right")\nC = "/eva/x"\n')
    found = [f.split(": ", 1)[1] for f in findings(sample, root=tmp_path)]
    assert found == ["'left/joint_states'", "a (left, right) tuple instead of ARMS"], "the docstring and C pass"
