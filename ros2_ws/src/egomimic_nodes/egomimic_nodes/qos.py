"""The QoS profiles of the graph, named by what they carry (one place to change them).

- SENSOR: cameras, joint states, poses. Reliable with a short history: on one machine with
  the shipped shared-memory profile, reliable delivery of 3 x 640x480 at 30 Hz is loss-free
  (bench/image_transport.py) and best-effort subscribers (rviz) still connect.
- COMMAND: policy actions, proposed and joint commands. Reliable, depth 1 on the reader side
  would drop; we keep 5 so a burst is seen and judged by the gate (staleness is by stamp).
- SENSOR_READER: best effort, for readers that take the newest sample (docker's probe): it also
  connects to best-effort publishers (stock camera drivers), which a reliable reader never does.
- LATCHED: status that late joiners must see (safety/status): transient local, depth 1.
- TF / TF_STATIC: tf2_ros's own (DynamicBroadcasterQoS: reliable, volatile, depth 100;
  StaticBroadcasterQoS: reliable, transient local, depth 1), so rviz and tf2 listeners connect.
"""

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

SENSOR = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5, reliability=ReliabilityPolicy.RELIABLE)
COMMAND = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
SENSOR_READER = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
"""A reader of a sensor stream whose publisher may be best effort (a stock camera driver, `ros2 bag
play` with the sensor-data profile): it connects to reliable publishers too. For readers that
use the newest sample (the policy's taken images keep depth 1 of the same), where a dropped frame is a late frame, not lost
data; the recorder keeps SENSOR (every frame of our camera node goes into the episode)."""
TF = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE)
TF_STATIC = LATCHED
