"""Hardware side of EVA: robot description, frames, kinematics, driver and camera backends.

ROS-free: every node in ros2_ws/src is a thin adapter over these modules.
"""
