"""colcon (ament_python) build of the node package for a real ROS 2 install.

In the pip venv the same package is installed by the top-level pyproject.toml instead. The
egomimic_hw / egomimic_safety / egomimic_policy libraries are pip-installed into the ROS
environment (`pip install -e <repo> --no-deps`).
"""

from setuptools import setup

NODES = [
    "driver_node",
    "camera_node",
    "frames_node",
    "gate_node",
    "policy_node",
    "recorder_node",
    "robot_state_node",
    "monitor_node",
    "webview_node",
    "bag_node",
]

setup(
    name="egomimic_nodes",
    version="0.1.0",
    packages=["egomimic_nodes"],
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/egomimic_nodes"]),
        ("share/egomimic_nodes", ["package.xml"]),
    ],
    entry_points={"console_scripts": [f"{n} = egomimic_nodes.{n}:main" for n in NODES]},
)
