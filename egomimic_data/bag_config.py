"""The bag node's settings (its parameters), apart from bags.py so that the launcher's graph (which
takes the bag_dir default from here) imports neither rosbags nor mcap."""

from __future__ import annotations

from dataclasses import dataclass, field

from egomimic_data.recording_config import RecordingConfigError, check_ranges


@dataclass(frozen=True)
class BagConfig:
    """The bag node's parameters (read at start)."""

    bag_dir: str = field(
        default="out/bags",
        metadata={"help": "directory the bags are written to (one rosbag2_<UTC start time> each); created if missing"},
    )
    images: bool = field(
        default=False,
        metadata={
            "help": "also record cameras/<cam>/image_raw and image_raw/compressed (27 MB/s for three 640x480 "
            "cameras at 30 Hz); off: every other topic (the launch argument bag_images)"
        },
    )
    queue_messages: int = field(
        default=4000,
        metadata={
            "help": "messages that may wait for the writer thread (about 4 s of the graph without images); a full "
            "queue drops the message and counts it",
            "range": (10, 1_000_000),
        },
    )
    take_rate_hz: float = field(
        default=50.0,
        metadata={
            "help": "how often the node takes what its readers hold (taken.py: one pass, not one callback per "
            "message); each reader keeps two seconds of its topic between two takes (half a second of images)",
            "range": (1.0, 1000.0),
        },
    )
    flush_period_s: float = field(
        default=1.0,
        metadata={
            "help": "the writer closes its MCAP chunk and flushes the file this often, so a kill -9 loses at most "
            "this much (egomimic-bag repair recovers the rest)",
            "range": (0.05, 60.0),
        },
    )

    def __post_init__(self) -> None:
        check_ranges(self)
        if not self.bag_dir.strip():
            raise RecordingConfigError("bag_dir must name a directory")
