"""Generate EVA's bimanual URDF from the library's facts (egomimic_hw.urdf.eva_urdf).

    .venv/bin/python tools/make_urdf.py                  # (re)write ros2_ws/src/egomimic_bringup/urdf/eva.urdf
    .venv/bin/python tools/make_urdf.py --check          # exit 1 if the committed file is not the generated one
    .venv/bin/python tools/make_urdf.py --extrinsics calib.json --out /tmp/eva.urdf

The committed file is this tool's output (tests/unit/egomimic_hw/test_urdf.py checks that it
is): change the X5 model, the limits or the mounts in egomimic_hw, then rerun. `--extrinsics` takes
a JSON object in the project's calibration form, `{"left_base_T_front_1": 4x4,
"right_base_T_front_1": 4x4, "left_link6_T_left_wrist": 4x4 (optional), ...}`, for a robot
calibrated anew (egomimic_hw.urdf.EvaMounts.from_extrinsics).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from egomimic_hw.urdf import EvaMounts, eva_urdf

REPO = Path(__file__).resolve().parents[1]
URDF_PATH = REPO / "ros2_ws" / "src" / "egomimic_bringup" / "urdf" / "eva.urdf"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out", type=Path, default=URDF_PATH, help=f"where to write (default {URDF_PATH.relative_to(REPO)})"
    )
    ap.add_argument("--extrinsics", type=Path, help="a JSON calibration (module docstring); default: the library's")
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when they differ")
    a = ap.parse_args(argv)
    mounts = EvaMounts.from_extrinsics(json.loads(a.extrinsics.read_text())) if a.extrinsics else None
    text = eva_urdf(mounts)
    if a.check:
        same = a.out.is_file() and a.out.read_text() == text
        print(f"{a.out}: {'up to date' if same else 'DIFFERS from the generated URDF; run tools/make_urdf.py'}")
        return 0 if same else 1
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    print(f"wrote {a.out} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
