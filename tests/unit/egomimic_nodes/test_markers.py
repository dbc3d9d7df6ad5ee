"""The rviz markers' content (egomimic_nodes.markers), its PNG rendering, and the rviz file."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import yaml

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_nodes.markers import (
    CHUNK_COLOR,
    GATE_COLORS,
    ROLE_COLORS,
    SceneState,
    box_edges,
    render_png,
    scene,
)

REPO = Path(__file__).resolve().parents[3]
RVIZ = REPO / "ros2_ws" / "src" / "egomimic_bringup" / "rviz" / "eva.rviz"


def a_scene(gate_state="ARMED") -> SceneState:
    kin = ArmKinematics()
    start = kin.forward(np.array([0.0, 0.8, 0.8, 0.0, 0.0, 0.0]))
    state = SceneState(gate_state=gate_state, gate_reason="" if gate_state == "ARMED" else "STALE_STATE")
    for arm in ARMS:
        state.measured[arm] = start
        state.proposed[arm] = start + np.r_[0.02, 0.0, 0.0, 0, 0, 0, 0]
        state.forwarded[arm] = start + np.r_[0.01, 0.0, 0.0, 0, 0, 0, 0]
        state.chunk[arm] = start[:3] + np.linspace(0, 1, 20)[:, None] * np.array([0.1, 0.05, -0.05])
        state.workspaces = dict.fromkeys(ARMS, ((0.05, -0.4, 0.0), (0.6, 0.4, 0.6)))
    return state


def test_every_role_chunk_workspace_and_the_gate_are_drawn_in_the_arms_base_frames():
    markers = scene(a_scene())
    for arm in ARMS:
        mine = [m for m in markers if m.ns.startswith(arm.value + "/")]
        assert {m.frame_id for m in mine} == {arm.hw_frame}, "rviz resolves the hardware frame through TF"
        for role, color in ROLE_COLORS.items():
            sphere, arrow = (m for m in mine if m.ns == f"{arm.value}/{role}")
            assert sphere.kind == "sphere" and arrow.kind == "arrow" and sphere.color == color
            tail, tip = np.array(arrow.points)
            assert np.isclose(np.linalg.norm(tip - tail), 0.05), "5 cm along the tool x axis"
        (chunk,) = (m for m in mine if m.ns == f"{arm.value}/chunk")
        assert chunk.kind == "line_strip" and len(chunk.points) == 20 and chunk.color == CHUNK_COLOR
        (box,) = (m for m in mine if m.ns == f"{arm.value}/workspace")
        assert box.kind == "line_list" and len(box.points) == 24
    (text,) = (m for m in markers if m.kind == "text")
    assert text.text == "ARMED" and text.color == GATE_COLORS["ARMED"]
    ids = [(m.ns, m.id) for m in markers]
    assert len(ids) == len(set(ids)), "each marker has its own (ns, id)"


def test_a_holding_gate_colours_the_text_and_the_workspace_and_says_why():
    markers = scene(a_scene("HOLD"))
    (text,) = (m for m in markers if m.kind == "text")
    assert text.text == "HOLD: STALE_STATE" and text.color == GATE_COLORS["HOLD"]
    assert all(m.color == GATE_COLORS["HOLD"] for m in markers if m.ns.endswith("/workspace"))


def test_streams_not_seen_and_bad_values_draw_nothing():
    state = SceneState()
    assert scene(state) == []
    state.measured[Arm.LEFT] = np.array([np.nan, 0, 0, 1, 0, 0, 0])
    state.chunk[Arm.RIGHT] = np.zeros((1, 3))  # one row is no path
    assert scene(state) == []


def test_box_edges_are_the_twelve_edges():
    pts = np.array(box_edges((0, 0, 0), (1, 2, 3)))
    lengths = sorted(np.linalg.norm(pts[0::2] - pts[1::2], axis=1).round(6))
    assert lengths == [1.0] * 4 + [2.0] * 4 + [3.0] * 4


def test_the_png_shows_each_arm_in_its_panel_with_the_roles_colours(tmp_path):
    path = tmp_path / "markers.png"
    render_png(scene(a_scene("HOLD")), path)
    img = cv2.imread(str(path))[:, :, ::-1]  # RGB
    assert img.shape == (480, 960, 3), "one 480 px panel per base frame"
    for panel in (img[:, :480], img[:, 480:]):
        for color in (*ROLE_COLORS.values(), CHUNK_COLOR, GATE_COLORS["HOLD"]):
            rgb = np.array(color[:3]) * 255
            close = np.all(np.abs(panel.astype(float) - rgb) < 2, axis=-1)
            assert close.sum() > 10, f"colour {color} drawn"


def _topics_and_frames(node, found):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("Topic", "Description Topic") and isinstance(value, dict):
                found.append(("topic", node.get("Class"), value["Value"], value.get("Reliability Policy")))
            elif key == "Fixed Frame":
                found.append(("frame", None, value, None))
            else:
                _topics_and_frames(value, found)
    elif isinstance(node, list):
        for item in node:
            _topics_and_frames(item, found)
    return found


def test_the_rviz_file_names_the_graphs_topics_with_their_types_and_a_urdf_frame():
    from egomimic_nodes import topics

    config = yaml.safe_load(RVIZ.read_text())
    found = _topics_and_frames(config, [])
    by_class = {
        "rviz_default_plugins/Image": [
            topics.IMAGE_RAW.resolve("eva", cam=c) for c in ("front_1", "left_wrist", "right_wrist")
        ],
        "rviz_default_plugins/MarkerArray": [topics.VIZ_MARKERS.resolve("eva")],
        "rviz_default_plugins/RobotModel": [topics.ROBOT_DESCRIPTION.resolve("eva")],
    }
    named = {}
    for kind, cls, value, reliability in found:
        if kind == "topic":
            named.setdefault(cls, []).append(value)
            if cls == "rviz_default_plugins/Image":
                assert reliability == "Best Effort", "images as rviz reads sensor streams"
    assert {k: sorted(v) for k, v in named.items()} == {k: sorted(v) for k, v in by_class.items()}
    (fixed,) = [value for kind, _, value, _ in found if kind == "frame"]
    urdf = (REPO / "ros2_ws" / "src" / "egomimic_bringup" / "urdf" / "eva.urdf").read_text()
    assert f'<link name="{fixed}"' in urdf
