"""The recorder's settings (the recorder node's top-level parameters) and the range check that
every recording config runs. Apart from recording.py so that the launcher's graph (which takes
the launch arguments' defaults from here) does not import zarr."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from egomimic_hw.description import CONTROL_RATE_HZ


class RecordingConfigError(ValueError):
    """A recording setting is out of range; the message names it and the accepted range."""


def check_ranges(config: Any) -> None:
    """Every field of a config dataclass with a `range` in its metadata lies in it (finite)."""
    for f in fields(config):
        if "range" not in f.metadata:
            continue
        value, (lo, hi) = getattr(config, f.name), f.metadata["range"]
        if isinstance(value, bool) or not (
            isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi
        ):
            raise RecordingConfigError(f"{f.name} must be in [{lo}, {hi}], got {value!r}")


IMAGE_TRANSPORTS = ("raw", "compressed")


@dataclass(frozen=True)
class RecorderConfig:
    """The recorder node's parameters (top level); `task_name` and `task_description` may be set
    while it runs and apply to the next episode."""

    record_dir: str = field(
        default="out/episodes",
        metadata={"help": "directory the episodes are written to (one <UTC start time>.zarr each); created if missing"},
    )
    task_name: str = field(
        default="unlabeled",
        metadata={"help": "task name written into the next episode", "runtime": True},
    )
    task_description: str = field(
        default="",
        metadata={"help": "task description written into the next episode", "runtime": True},
    )
    auto_start: bool = field(
        default=False,
        metadata={
            "help": "open an episode as soon as every stream is live (once), commit it at shutdown "
            "(the launch argument record:=true)"
        },
    )
    fps: float = field(
        default=CONTROL_RATE_HZ,
        metadata={"help": "steps per second: the control rate (the episode's fps attribute)", "range": (1.0, 1000.0)},
    )
    queue_steps: int = field(
        default=60,
        metadata={
            "help": "steps that may wait for the writer thread (2 s at 30 Hz, 2.7 MB each); a full queue "
            "drops the step and counts it",
            "range": (1, 3000),
        },
    )
    block_steps: int = field(
        default=30,
        metadata={
            "help": "steps written per block behind the commit marker: a crash loses at most one block (1 s). "
            "zarr's cost is per write call (17 small arrays and 3 image shards per block): 60 saves about a "
            "quarter of the recorder's zarr CPU (0.012 CPU-s per recorded s) for up to 2 s lost in a crash",
            "range": (1, 3000),
        },
    )
    image_transport: str = field(
        default="raw",
        metadata={
            "help": "raw: subscribe to cameras/<cam>/image_raw and encode each frame (JPEG, jpeg_quality); "
            "compressed: subscribe to image_raw/compressed and store the cameras' JPEGs as they came (no "
            "second encode: about 0.1 CPU-s per recorded s less), each checked to be 4:4:4 with libjpeg's tables, "
            "of the episode's quality (the head camera's when it opens) and size (the launcher uses it with "
            "record:=true)",
        },
    )
    jpeg_quality: int = field(
        default=85,
        metadata={
            "help": "the JPEG quality of the recorder's own encoding (image_transport raw; upstream's ZarrWriter: "
            "85); with compressed, the episode takes the cameras' quality, read from their JPEGs",
            "range": (1, 100),
        },
    )
    min_free_mb: float = field(
        default=1024.0,
        metadata={
            "help": "refuse to start, and stop recording, when the episode's disk has less free space than "
            "this (MB): a clean stop before the disk fills",
            "range": (0.0, 1e9),
        },
    )
    disk_check_period_s: float = field(
        default=1.0,
        metadata={"help": "how often free space is checked while recording", "range": (0.05, 60.0)},
    )
    stop_timeout_s: float = field(
        default=3.0,
        metadata={
            "help": "how long a stop waits for the writer to write what is queued and close the episode "
            "(the launcher escalates to SIGTERM after 5 s)",
            "range": (0.1, 60.0),
        },
    )
    status_period_s: float = field(
        default=1.0,
        metadata={
            "help": "recorder/status and /diagnostics period while recording (also sent on every change)",
            "range": (0.1, 60.0),
        },
    )

    def __post_init__(self) -> None:
        if not self.record_dir.strip():
            raise RecordingConfigError("record_dir must name a directory")
        if not self.task_name.strip():
            raise RecordingConfigError("task_name must be a non-empty string")
        if self.image_transport not in IMAGE_TRANSPORTS:
            raise RecordingConfigError(
                f"image_transport must be one of {', '.join(IMAGE_TRANSPORTS)}, got {self.image_transport!r}"
            )
        check_ranges(self)
