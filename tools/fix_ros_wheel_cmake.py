"""Point the ROS message wheels' exported CMake targets at this venv.

Why: the `ros-*` wheels were built in a manylinux container and their
`*__rosidl_generator_pyExport.cmake` files still name that container's Python and numpy
include directories, so building our own interfaces against them fails with "includes
non-existent path /opt/python/...". Idempotent; rerun after reinstalling message wheels.
"""

import pathlib
import sys
import sysconfig

import numpy

BUILD_MACHINE_PATHS = {
    "/opt/python/cp311-cp311/include/python3.11": sysconfig.get_paths()["include"],
    "/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include": numpy.get_include(),
}


def main() -> int:
    patched = 0
    for cmake_file in (pathlib.Path(sys.prefix) / "share").glob("*/cmake/*.cmake"):
        text = cmake_file.read_text()
        fixed = text
        for wrong, right in BUILD_MACHINE_PATHS.items():
            fixed = fixed.replace(wrong, right)
        if fixed != text:
            cmake_file.write_text(fixed)
            patched += 1
    print(f"fix_ros_wheel_cmake: patched {patched} CMake export files under {sys.prefix}/share")
    return 0


if __name__ == "__main__":
    sys.exit(main())
