"""colcon (ament_python) build of the bringup package for a real ROS 2 install."""

from glob import glob

from setuptools import setup

setup(
    name="egomimic_bringup",
    version="0.1.0",
    packages=["egomimic_bringup"],
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/egomimic_bringup"]),
        ("share/egomimic_bringup", ["package.xml"]),
        ("share/egomimic_bringup/launch", glob("launch/*.launch.py")),
        ("share/egomimic_bringup/config", glob("config/*.yaml")),
        ("share/egomimic_bringup/rviz", glob("rviz/*.rviz")),
        ("share/egomimic_bringup/urdf", glob("urdf/*.urdf")),
    ],
)
