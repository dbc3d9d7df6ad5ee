"""Robot data on disk: the EVA episode format (`episode_format`), and where the live recorder and
the training dataset belong.

Why a package of its own: the camera replay backend (egomimic_hw) reads episodes, the policy
side writes and trains on them. Kept below both, it imports from egomimic_hw only the
dependency-free `egomimic_hw.description` (arm and camera names), never the policy, the nodes or
ROS, so either side can use it without importing the other (tests/unit/test_layering.py).
"""
