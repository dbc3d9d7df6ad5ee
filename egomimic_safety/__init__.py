"""The safety gate: pure logic between proposed commands and the arms (no ROS, explicit time)."""
