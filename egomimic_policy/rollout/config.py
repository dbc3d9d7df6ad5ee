"""What the policy node runs and how: the policy and where it runs, the control rate, and how
fresh and how close in time the inputs of one observation must be.

The node declares these fields as its top-level parameters (same names); the executor's own
settings are ExecutorConfig (`executor.*`, scheduler.py), the scripted motion's
ScriptedMotionConfig and ScriptedChunkConfig (`scripted.*`), the remote client's RemoteConfig
(`remote.*`). Values are checked where they are used (ExecutorConfig, the observation
synchronizer, egomimic_policy.loading), so a wrong one is refused at start with that code's
message; the ranges here refuse what is out of any sensible span before that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

AGE_MAX_S = 10.0
"""Input ages and tolerances: an input 10 s old is no observation of the present."""


@dataclass(frozen=True)
class RolloutConfig:
    policy: str = field(
        default="scripted", metadata={"help": "scripted | expert | fold | pi | moe | <checkpoint> | tcp://host:port"}
    )
    rate_hz: float = field(
        default=30.0,
        metadata={"help": "control tick rate (Hz); the policy's rows must come at this rate", "range": (1.0, 1000.0)},
    )
    inject_latency_ms: float = field(
        default=0.0,
        metadata={
            "help": "extra latency (ms) added to every policy query (rehearse a slow model)",
            "range": (0.0, 60_000.0),
        },
    )
    max_input_age_s: float = field(
        default=0.2,
        metadata={"help": "arm state older than this (s) is stale: no query is made", "range": (0.0, AGE_MAX_S)},
    )
    max_image_age_s: float = field(
        default=0.15,
        metadata={"help": "a camera frame older than this (s) is stale: no query is made", "range": (0.0, AGE_MAX_S)},
    )
    sync_tolerance_s: float = field(
        default=0.05, metadata={"help": "inputs of one observation must agree within (s)", "range": (0.0, AGE_MAX_S)}
    )
    cache_dir: str = field(default="", metadata={"help": "checkpoint cache directory ('' = the families' default)"})
    config_sha256: str = field(
        default="",
        metadata={
            "help": "pin: refuse a checkpoint whose model config (canonical JSON) has another SHA-256 ('' = no pin)"
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of untrained rehearsal weights (fold/pi/moe)"})
    device: str = field(default="cpu", metadata={"help": "torch device of local model families (cpu | cuda | cuda:N)"})
    allow_cpu_policy: bool = field(
        default=False,
        metadata={
            "help": "with device:=cuda and no CUDA device, run the model on the CPU instead of refusing to start (slow)"
        },
    )
