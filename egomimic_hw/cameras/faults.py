"""Camera faults injected on demand, for the safety gate's fault battery and rehearsals.

Spec strings (the camera node's `inject_fault` parameter, settable at runtime):
  ""               no fault
  "freeze:<cam>"   keep delivering <cam>'s last image content with fresh stamps (a hung
                   pipeline that still ticks: only the content check can see it)
  "stall:<cam>"    deliver nothing from <cam> (a camera that disconnected: only silence shows it)
`FaultInjectingCamera` wraps any backend and applies the fault to what it reads, before shaping,
health and publication, so the fault looks to every consumer (the health monitor included)
exactly like the real failure. Faults only ever make a camera look worse, so the gate fails safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egomimic_hw.cameras.base import CameraBackend, Frame, Intrinsics
from egomimic_hw.errors import ConfigError

KINDS = ("freeze", "stall")
SPEC_HELP = "runtime fault: '' | freeze:<cam> | stall:<cam>"
"""What an `inject_fault` value may be (the parameter's description)."""


@dataclass(frozen=True)
class CameraFault:
    kind: str = ""
    camera: str = ""

    @property
    def active(self) -> bool:
        return bool(self.kind)

    def freezes(self, camera: str) -> bool:
        return self.kind == "freeze" and self.camera == camera

    def stalls(self, camera: str) -> bool:
        return self.kind == "stall" and self.camera == camera

    def describe(self) -> str:
        """'' when inactive, else the spec it was parsed from ('freeze:front_1')."""
        return f"{self.kind}:{self.camera}" if self.active else ""


def parse_fault(spec: str, cameras: tuple[str, ...] | list[str]) -> CameraFault:
    """Parse an `inject_fault` value; unknown kinds or cameras raise ConfigError naming the choices."""
    spec = spec.strip()
    if not spec:
        return CameraFault()
    kind, sep, camera = spec.partition(":")
    if not sep or kind not in KINDS:
        raise ConfigError(f"inject_fault {spec!r}: expected '' or '<kind>:<camera>' with kind in {list(KINDS)}")
    if camera not in cameras:
        raise ConfigError(f"inject_fault {spec!r}: camera {camera!r} is not served here; cameras: {list(cameras)}")
    return CameraFault(kind, camera)


class FaultInjectingCamera:
    """A CameraBackend that reads the wrapped one and delivers its frames, or fails as `fault`
    says for this camera. `fault` may be replaced at any time from another thread (the node's
    parameter callback); each read acts on the one it sees."""

    def __init__(self, backend: CameraBackend, fault: CameraFault = CameraFault()):
        self.wrapped = backend
        self.camera = backend.camera
        self.fault = fault
        self._frozen: Frame | None = None
        """The frame a freeze repeats: a copy, since a backend may reuse its image buffer."""

    @property
    def intrinsics(self) -> Intrinsics:
        return self.wrapped.intrinsics

    def read(self, timeout_s: float) -> Frame | None:
        frame = self.wrapped.read(timeout_s)
        if frame is None:
            return None
        fault = self.fault
        if fault.stalls(self.camera):
            self._frozen = None
            return None  # the capture loop reads again: the device keeps running, nothing comes out
        if not fault.freezes(self.camera):
            self._frozen = None
            return frame
        if self._frozen is None:
            self._frozen = Frame(np.array(frame.image, copy=True), frame.capture_ns, frame.index, frame.encoding)
        frozen = self._frozen
        return Frame(frozen.image, frame.capture_ns, frame.index, frozen.encoding)

    def close(self) -> None:
        self.wrapped.close()
