"""The EVA graph definition (graph.py), its parameter files (config/) and launch files (launch/)."""

from pathlib import Path


def _package_dir() -> Path:
    """ros2_ws/src/egomimic_bringup in a source checkout (the pip install is editable);
    the package's share directory when colcon installed it under a real ROS 2."""
    source = Path(__file__).resolve().parent.parent
    if (source / "config").is_dir():
        return source
    from ament_index_python.packages import get_package_share_directory

    return Path(get_package_share_directory("egomimic_bringup"))


PACKAGE_DIR = _package_dir()
CONFIG_DIR = PACKAGE_DIR / "config"
LAUNCH_DIR = PACKAGE_DIR / "launch"
