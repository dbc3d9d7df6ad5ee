"""What the rviz markers (`viz/markers`) show, as plain data: no ROS here, so it is tested and
drawn (`render_png`) without DDS; monitor_node turns each MarkerSpec into a
visualization_msgs/Marker.

Per arm, in its own base frame (`<arm>_base`, the hardware frame rviz resolves through TF):
- the measured, proposed and forwarded end-effector poses (link6): a sphere and a 5 cm arrow
  along the tool's x axis each, coloured by role;
- the current action chunk's positions as a line (a position is the same in the hardware and
  the dataset frame: they differ in orientation only, egomimic_hw.frames);
- the gate's workspace box as a wireframe, in the gate's colour when the gate is holding.
And the gate state as text above the left base, coloured by state, with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.rotations import quat_to_mat

Color = tuple[float, float, float, float]
Point = tuple[float, float, float]

ROLE_COLORS: dict[str, Color] = {
    "measured": (0.2, 0.6, 1.0, 1.0),
    "proposed": (1.0, 0.8, 0.1, 0.9),
    "forwarded": (0.2, 0.9, 0.3, 0.9),
}
"""Measured: what the arm reports; proposed: what the policy asked (command/proposed);
forwarded: what the gate sent (FK of joint_command)."""
CHUNK_COLOR: Color = (1.0, 0.5, 0.0, 0.8)
GATE_COLORS: dict[str, Color] = {
    "DISARMED": (0.6, 0.6, 0.6, 1.0),
    "ARMING": (1.0, 0.85, 0.1, 1.0),
    "ARMED": (0.1, 0.85, 0.2, 1.0),
    "HOLD": (1.0, 0.5, 0.0, 1.0),
    "ESTOP": (1.0, 0.1, 0.1, 1.0),
}
WORKSPACE_COLOR: Color = (0.5, 0.5, 0.9, 0.6)
AXIS_LENGTH_M = 0.05
SPHERE_M = 0.025
TEXT_HEIGHT_M = 0.05
TEXT_ABOVE_M = 0.6
VIEW_MARGIN_M = 0.08
"""render_png: the view around the poses and the chunk."""


@dataclass(frozen=True)
class MarkerSpec:
    """One marker: `kind` is sphere | arrow | line_strip | line_list | text; `points` are in
    `frame_id` (sphere and text: one point; arrow: tail, head; line_list: pairs)."""

    ns: str
    id: int
    kind: str
    frame_id: str
    points: tuple[Point, ...]
    color: Color
    scale: Point
    text: str = ""


@dataclass
class SceneState:
    """The latest of each stream the monitor has seen (None: not seen)."""

    measured: dict[Arm, np.ndarray | None] = field(default_factory=lambda: dict.fromkeys(ARMS))
    proposed: dict[Arm, np.ndarray | None] = field(default_factory=lambda: dict.fromkeys(ARMS))
    forwarded: dict[Arm, np.ndarray | None] = field(default_factory=lambda: dict.fromkeys(ARMS))
    """Poses [x, y, z, qw, qx, qy, qz] in the arm's hardware frame."""
    chunk: dict[Arm, np.ndarray | None] = field(default_factory=lambda: dict.fromkeys(ARMS))
    """(N, 3) positions of the current action chunk."""
    gate_state: str = ""
    gate_reason: str = ""
    workspaces: Mapping[Arm, tuple[Sequence[float], Sequence[float]]] = field(default_factory=dict)
    """Per arm the gate's workspace box (min corner, max corner), hardware frame."""


def _point(v) -> Point:
    return (float(v[0]), float(v[1]), float(v[2]))


def pose_markers(arm: Arm, role: str, pose: np.ndarray, first_id: int) -> list[MarkerSpec]:
    """A sphere at the position and an arrow along the pose's x axis."""
    p = np.asarray(pose, float)
    tip = p[:3] + quat_to_mat(p[3:7]) @ np.array([AXIS_LENGTH_M, 0.0, 0.0])
    color, ns = ROLE_COLORS[role], f"{arm.value}/{role}"
    return [
        MarkerSpec(ns, first_id, "sphere", arm.hw_frame, (_point(p),), color, (SPHERE_M,) * 3),
        MarkerSpec(ns, first_id + 1, "arrow", arm.hw_frame, (_point(p), _point(tip)), color, (0.008, 0.016, 0.0)),
    ]


def box_edges(lo: Sequence[float], hi: Sequence[float]) -> tuple[Point, ...]:
    """The 12 edges of an axis-aligned box as 24 points (line_list pairs)."""
    corners = [(x, y, z) for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])]
    pairs = []
    for i, a in enumerate(corners):
        for b in corners[i + 1 :]:
            if sum(u != v for u, v in zip(a, b, strict=True)) == 1:  # differ along one axis: an edge
                pairs += [_point(a), _point(b)]
    return tuple(pairs)


def scene(state: SceneState) -> list[MarkerSpec]:
    """Every marker for `state`; a stream not seen yet has no marker (rviz keeps nothing stale:
    the node publishes DELETEALL first)."""
    out: list[MarkerSpec] = []
    gate_color = GATE_COLORS.get(state.gate_state, GATE_COLORS["DISARMED"])
    holding = state.gate_state in ("HOLD", "ESTOP")
    for arm in ARMS:
        for k, role in enumerate(ROLE_COLORS):
            pose = getattr(state, role)[arm]
            if pose is not None and np.all(np.isfinite(pose)):
                out += pose_markers(arm, role, pose, 10 * k)
        chunk = state.chunk[arm]
        if chunk is not None and len(chunk) >= 2 and np.all(np.isfinite(chunk)):
            points = tuple(_point(p) for p in chunk)
            out.append(
                MarkerSpec(f"{arm.value}/chunk", 0, "line_strip", arm.hw_frame, points, CHUNK_COLOR, (0.006,) * 3)
            )
        if arm in state.workspaces:
            lo, hi = state.workspaces[arm]
            color = gate_color if holding else WORKSPACE_COLOR
            out.append(
                MarkerSpec(
                    f"{arm.value}/workspace", 0, "line_list", arm.hw_frame, box_edges(lo, hi), color, (0.003,) * 3
                )
            )
    if state.gate_state:
        text = state.gate_state + (f": {state.gate_reason}" if state.gate_reason else "")
        out.append(
            MarkerSpec(
                "gate",
                0,
                "text",
                Arm.LEFT.hw_frame,
                ((0.0, 0.0, TEXT_ABOVE_M),),
                gate_color,
                (0.0, 0.0, TEXT_HEIGHT_M),
                text,
            )
        )
    return out


def render_png(markers: Sequence[MarkerSpec], path, size_px: int = 480) -> None:
    """Draw `markers` from above (x up the image, y to the left, as rviz's top-down view of a base
    frame), one panel per frame id, into a PNG: what the README shows and a test checks."""
    import cv2

    frames = sorted({m.frame_id for m in markers})
    panels = []
    for frame in frames:
        mine = [m for m in markers if m.frame_id == frame and m.kind != "text"]
        # framed on the poses and the chunk (the workspace box is drawn, clipped, around them)
        near = [p for m in mine if m.kind != "line_list" for p in m.points] or [p for m in mine for p in m.points]
        pts = np.array(near or [(0.0, 0.0, 0.0)], float)
        lo, hi = pts[:, :2].min(0) - VIEW_MARGIN_M, pts[:, :2].max(0) + VIEW_MARGIN_M
        span = float(max(hi - lo))
        img = np.full((size_px, size_px, 3), 255, np.uint8)

        def px(p, lo=lo, hi=hi, span=span):
            # image column from -y, row from -x: the base frame seen from above, x forward (up)
            col = int(round((hi[1] - p[1]) / span * (size_px - 1)))
            row = int(round((lo[0] + span - p[0]) / span * (size_px - 1)))
            return col, row

        def bgr(c: Color) -> tuple[int, int, int]:
            return int(255 * c[2]), int(255 * c[1]), int(255 * c[0])

        for m in mine:
            if m.kind == "sphere":
                cv2.circle(img, px(m.points[0]), 6, bgr(m.color), -1)
            elif m.kind == "arrow":
                cv2.arrowedLine(img, px(m.points[0]), px(m.points[1]), bgr(m.color), 2, tipLength=0.3)
            elif m.kind == "line_strip":
                cv2.polylines(img, [np.array([px(p) for p in m.points], np.int32)], False, bgr(m.color), 2)
            elif m.kind == "line_list":
                for a, b in zip(m.points[::2], m.points[1::2], strict=True):
                    cv2.line(img, px(a), px(b), bgr(m.color), 1)
        cv2.putText(img, f"{frame} (top view)", (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (0, 0, 0), 1)
        legend = [*ROLE_COLORS.items(), ("chunk", CHUNK_COLOR), ("workspace", WORKSPACE_COLOR)]
        for i, (label, color) in enumerate(legend):
            cv2.putText(img, label, (8, 42 + 18 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.45, bgr(color), 1)
        for m in markers:
            if m.kind == "text" and m.frame_id == frame:
                cv2.putText(img, m.text, (8, size_px - 12), cv2.FONT_HERSHEY_SIMPLEX, 0.6, bgr(m.color), 2)
        panels.append(img)
    cv2.imwrite(str(path), np.concatenate(panels, axis=1) if panels else np.full((size_px, size_px, 3), 255, np.uint8))
