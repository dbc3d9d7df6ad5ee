"""Rollout: execute action chunks at the control rate while the model runs in a worker.

`scheduler` is the clock-free core (queue, cadence, alignment, blending, running dry),
`trajectory` the row math, `speed_limit` the published steps held under the gate's speed
limits, `executor` the worker thread around the core, `history` the model's
observation window of past ticks, `config` what the policy node runs and how.
"""

from egomimic_policy.rollout.config import RolloutConfig
from egomimic_policy.rollout.executor import AsyncChunkExecutor, ObservationUnavailable
from egomimic_policy.rollout.history import ObservationHistory
from egomimic_policy.rollout.scheduler import Blend, Cadence, ChunkScheduler, ExecutorConfig, TickResult, TickStatus
from egomimic_policy.rollout.trajectory import Target

__all__ = [
    "AsyncChunkExecutor",
    "Blend",
    "Cadence",
    "ChunkScheduler",
    "ExecutorConfig",
    "ObservationHistory",
    "ObservationUnavailable",
    "RolloutConfig",
    "Target",
    "TickResult",
    "TickStatus",
]
