"""egomimic-launch: runs the EVA graph (egomimic_bringup.graph) as real processes without
ROS 2's `launch` (which has no PyPI wheels): ordered start, graph waits, lifecycle activation,
prefixed output, signal forwarding, reverse-order teardown and a safe stop when a required
node dies. See `egomimic-launch --help`.
"""
