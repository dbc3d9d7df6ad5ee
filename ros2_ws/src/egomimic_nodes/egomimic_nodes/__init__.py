"""rclpy adapters over the egomimic libraries: one `<name>_node.py` per node, ROS plumbing only.

Every node runs as `python -m egomimic_nodes.<name>_node --ros-args ...`, so the same
parameter files and remaps work under a real ROS 2 install.
"""
