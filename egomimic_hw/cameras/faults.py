"""Camera faults injected on demand, for the safety gate's fault battery and rehearsals.

Spec strings (the camera node's `inject_fault` parameter, settable at runtime):
  ""               no fault
  "freeze:<cam>"   keep publishing <cam>'s last image content with fresh stamps (a hung
                   pipeline that still ticks: only the content check can see it)
  "stall:<cam>"    stop publishing <cam> (a camera that disconnected: only silence shows it)
Faults act where frames are published, after the backend, so they look to every consumer
exactly like the real failure. They only ever make a camera look worse, so the gate fails safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from egomimic_hw.errors import ConfigError

KINDS = ("freeze", "stall")


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
