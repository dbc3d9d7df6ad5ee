"""The executor's core: a queue of time-stamped targets, when to query, how to merge a chunk.

Pure and clock-free (times are arguments, STYLE.md "Core and adapter"), so every decision is a
deterministic unit test; `executor.AsyncChunkExecutor` adds the worker thread around it.

Per tick (`tick(now_ns)`), one of four statuses:
- RUNNING: the queue covers `now`; the target is the queue evaluated at `now`.
- HOLDING: the queue ran dry (its last row is in the past): the last row is repeated, for at
  most `max_dry_s`, and every such tick is counted. Holding makes a dead policy look alive
  (docs/eva.md, upstream safety gates), so it is bounded and reported, never silent.
- STOPPED: dry for longer than `max_dry_s`, or the newest merged chunk answers an observation
  older than `max_open_loop_s` (inputs went stale, so no new query was made: the queue would
  otherwise keep executing a plan made from old inputs): no target. The node then publishes
  nothing and the safety gate sees a stale command and holds the arms itself.
- WAITING: no chunk yet (start, or after `reset`): no target.

When to query (`cadence`), never while a query is in flight:
- every_n: every `query_every_n_ticks` ticks (upstream's `query_frequency`; 30 = 1 Hz).
- low_water: when the queue covers less than the measured query latency (max of the recent
  queries) plus `low_water_s`: the next chunk arrives before the queue runs out.
- always: back to back (the freshest chunks; costs the most compute).
Whatever the cadence, a query is also due when the plan being executed answers an observation
older than `replan_after_s` (upstream replans at 1 Hz): a long chunk (Fold's 100 rows = 3.3 s)
is not executed open loop to its end; `max_open_loop_s` is the hard stop behind it.

Merging: a chunk that arrives is merged by the next tick, at that tick's `now` (at most one
merge per tick: if two answers arrive between ticks, the one for the newer observation wins and
the other is counted as superseded; two crossfades started at one instant would compound into a
steeper one). Row i is for `observation_stamp + i * period`; rows whose time has passed are
counted as dropped (one is kept only to interpolate up to `now`). After rest
(`delay_after_rest`, on for every policy that is not clock-driven: PolicySpec.clock_driven): a
chunk merged into an empty queue (the start, a reset) or one that ran dry is first delayed by
the time the arm stood still since its observation (from the later of the observation and the
queue's last row, to `now`). Rows for that time were planned as motion that never happened:
skipping them starts the plan where the model expected the arm to be a latency later, not where
it stands (a first inference of 400 ms under load started 39 mm away: the gate refused
START_TOO_FAR). A clock-driven policy's rows are functions of the clock and stay where they are. Only the first `commit_rows`
rows of a chunk are used (0 = all). The queue keeps its rows before the new chunk's first row;
from there on the new chunk replaces it, blended (`blend`):
- none: switch at once (a jump at the seam when the chunks disagree).
- ensemble: temporal ensembling as upstream, `commit[j] = w * prev[n + j] + (1 - w) * new[j]`
  with w = `ensemble_weight`, where the old queue still has rows.
- crossfade: the weight of the old queue falls linearly from 1 at `now` to 0 over
  `crossfade_rows` periods (an old queue that ends earlier is held at its last row, which is
  what the executor would command anyway), so the command is continuous across every seam.
- inpaint: real-time-chunking style (Black et al. 2025). When a query starts, the rows the
  queue will execute from the observation's time until the answer can be merged (the measured
  latency, max of the recent queries, plus one period for the merge tick) are already
  committed; `inpaint_prefix` hands them to the policy as Observation.prefix, and a family
  that can (fold, pi, moe) generates its chunk conditioned on them, its first rows equal to
  them. On merge, every new row up to the prefix's last row is taken from the committed queue
  (exact continuity, whatever the model returned there), and the old queue's weight then falls
  linearly to 0 over `crossfade_rows` periods from that row on, so a model that does not
  continue the prefix exactly (or one that ignores it: scripted, or a latency longer than the
  prefix) still gives a continuous command; for a model that does, the two plans already agree
  there and the crossfade changes nearly nothing.

Speed: every published target's step from the previous published one is held to
`max_ee_speed_m_s` and `max_ee_angular_speed_rad_s` x the ticks' dt (speed_limit.py), below the
gate's limits, and counted (`speed_limited`): a sampled plan's uneven row is followed at the
limit instead of tripping the gate's TRANSLATION_RATE HOLD. A plan that runs further ahead than
`speed_limit_max_lag_m` / `_rad` is running away: STOPPED (no target, `runaway_ticks`) until
reset, so the gate holds on the silence. The queue itself is not changed (the inpaint prefix is
the plan's rows), and a reset forgets the previous target and a runaway.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from egomimic_hw.description import X5_LIMITS
from egomimic_hw.errors import ConfigError, PoseError
from egomimic_policy.interface import Chunk
from egomimic_policy.rollout import trajectory as tj
from egomimic_policy.rollout.speed_limit import SpeedLimiter
from egomimic_policy.rollout.trajectory import Target, Trajectory

NS_PER_S = 1_000_000_000
TIME_MAX_S = 60.0
"""The longest time an executor setting may name (a parameter's range): a minute of open loop,
of holding or of waiting is already far beyond any use."""
ROWS_MAX = 10_000
SPEED_MARGIN = 0.9
"""The executor's default speed limits are this fraction of the X5's declared ones, which are the
safety gate's defaults: a step the executor passes is never one the gate refuses for its speed."""
"""The largest count of rows, ticks or queries a setting may name (5.5 minutes of rows at 30 Hz)."""


class Cadence(str, enum.Enum):
    EVERY_N = "every_n"
    LOW_WATER = "low_water"
    ALWAYS = "always"


class Blend(str, enum.Enum):
    NONE = "none"
    ENSEMBLE = "ensemble"
    CROSSFADE = "crossfade"
    INPAINT = "inpaint"


class TickStatus(str, enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    HOLDING = "holding"
    STOPPED = "stopped"


@dataclass(frozen=True)
class ExecutorConfig:
    rate_hz: float = field(
        default=30.0, metadata={"help": "control tick rate (Hz); EVA runs at 30 Hz", "range": (0.0, 1000.0)}
    )
    cadence: str = field(default="low_water", metadata={"help": "when to query: every_n | low_water | always"})
    query_every_n_ticks: int = field(
        default=30, metadata={"help": "cadence every_n: ticks between queries (upstream 30)", "range": (1, ROWS_MAX)}
    )
    low_water_s: float = field(
        default=0.1,
        metadata={
            "help": "cadence low_water: margin (s) beyond the measured query latency",
            "range": (0.0, TIME_MAX_S),
        },
    )
    commit_rows: int = field(
        default=0, metadata={"help": "rows of each chunk to use (0 = all)", "range": (0, ROWS_MAX)}
    )
    blend: str = field(
        default="crossfade",
        metadata={
            "help": "chunk seams: none | ensemble | crossfade | inpaint (pass the committed prefix to the policy)"
        },
    )
    ensemble_weight: float = field(
        default=0.5, metadata={"help": "blend ensemble: weight of the previous chunk in [0, 1]", "range": (0.0, 1.0)}
    )
    crossfade_rows: int = field(
        default=8,
        metadata={
            "help": "blend crossfade / inpaint: periods over which the old chunk fades out (inpaint: after the prefix)",
            "range": (1, ROWS_MAX),
        },
    )
    max_dry_s: float = field(
        default=0.5,
        metadata={
            "help": "hold the last target at most this long (s) when the queue runs dry, then stop publishing",
            "range": (0.0, TIME_MAX_S),
        },
    )
    replan_after_s: float = field(
        default=1.0,
        metadata={
            "help": "query when the plan answers an observation older than this (s), whatever the cadence; upstream replans at 1 Hz",
            "range": (0.0, TIME_MAX_S),
        },
    )
    max_open_loop_s: float = field(
        default=2.0,
        metadata={
            "help": "stop publishing when the newest chunk answers an observation older than this (s): "
            "inputs went stale or the model is too slow",
            "range": (0.0, TIME_MAX_S),
        },
    )
    retry_backoff_s: float = field(
        default=0.1, metadata={"help": "wait (s) after a failed query before the next", "range": (0.0, TIME_MAX_S)}
    )
    latency_window: int = field(
        default=100, metadata={"help": "queries kept for latency statistics", "range": (1, ROWS_MAX)}
    )
    max_ee_speed_m_s: float = field(
        default=round(SPEED_MARGIN * X5_LIMITS.ee_speed_max_m_s, 6),
        metadata={
            "help": "each published step of an end effector is held to this speed (m/s) x the ticks' dt; "
            "keep it below the safety gate's max_ee_speed_m_s (0.6), which HOLDs on a faster step",
            "range": (0.001, X5_LIMITS.ee_speed_max_m_s),
        },
    )
    max_ee_angular_speed_rad_s: float = field(
        default=round(SPEED_MARGIN * X5_LIMITS.ee_angular_speed_max_rad_s, 6),
        metadata={
            "help": "each published step of an end effector's orientation is held to this (rad/s) x dt; "
            "keep it below the safety gate's max_ee_angular_speed_rad_s (1.8)",
            "range": (0.001, X5_LIMITS.ee_angular_speed_max_rad_s),
        },
    )
    speed_limit_max_dt_periods: float = field(
        default=2.0,
        metadata={
            "help": "dt in the two limits above is capped at this many periods, as the gate's "
            "rate_limit_max_dt_periods (2): a gap in the ticks grants no larger step",
            "range": (0.1, 10.0),
        },
    )
    speed_limit_max_lag_m: float = field(
        default=0.03,
        metadata={
            "help": "a plan further ahead of the speed-limited target than this (m) is running away: stop "
            "publishing until policy/reset (the gate then holds on the silence)",
            "range": (0.001, 1.0),
        },
    )
    speed_limit_max_lag_rad: float = field(
        default=0.1,
        metadata={"help": "the same bound for orientation (rad)", "range": (0.001, math.pi)},
    )

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_hz) and 0 < self.rate_hz <= 1000):
            raise ConfigError(f"rate_hz must be in (0, 1000] Hz, got {self.rate_hz}")
        choices = [c.value for c in Cadence]
        if self.cadence not in choices:
            raise ConfigError(f"cadence {self.cadence!r} is not one of {choices}")
        blends = [b.value for b in Blend]
        if self.blend not in blends:
            raise ConfigError(f"blend {self.blend!r} is not one of {blends}")
        if self.query_every_n_ticks < 1:
            raise ConfigError(f"query_every_n_ticks must be >= 1, got {self.query_every_n_ticks}")
        if not (math.isfinite(self.low_water_s) and self.low_water_s >= 0):
            raise ConfigError(f"low_water_s must be >= 0 s, got {self.low_water_s}")
        if self.commit_rows < 0:
            raise ConfigError(f"commit_rows must be >= 0 (0 = all rows), got {self.commit_rows}")
        if not 0.0 <= self.ensemble_weight <= 1.0:
            raise ConfigError(f"ensemble_weight must be in [0, 1], got {self.ensemble_weight}")
        if self.crossfade_rows < 1:
            raise ConfigError(f"crossfade_rows must be >= 1, got {self.crossfade_rows}")
        if not (math.isfinite(self.max_dry_s) and self.max_dry_s >= 0):
            raise ConfigError(f"max_dry_s must be >= 0 s, got {self.max_dry_s}")
        if not (math.isfinite(self.replan_after_s) and self.replan_after_s > 0):
            raise ConfigError(f"replan_after_s must be > 0 s, got {self.replan_after_s}")
        if not (math.isfinite(self.max_open_loop_s) and self.max_open_loop_s > self.replan_after_s):
            raise ConfigError(
                f"max_open_loop_s must be > replan_after_s ({self.replan_after_s} s), got {self.max_open_loop_s}"
            )
        if not (math.isfinite(self.retry_backoff_s) and self.retry_backoff_s >= 0):
            raise ConfigError(f"retry_backoff_s must be >= 0 s, got {self.retry_backoff_s}")
        if self.latency_window < 1:
            raise ConfigError(f"latency_window must be >= 1, got {self.latency_window}")
        for name, top in (
            ("max_ee_speed_m_s", X5_LIMITS.ee_speed_max_m_s),
            ("max_ee_angular_speed_rad_s", X5_LIMITS.ee_angular_speed_max_rad_s),
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 < value <= top):
                raise ConfigError(f"{name} must be in (0, {top}] (the X5's declared limit), got {value}")
        if not (math.isfinite(self.speed_limit_max_dt_periods) and self.speed_limit_max_dt_periods > 0):
            raise ConfigError(f"speed_limit_max_dt_periods must be > 0, got {self.speed_limit_max_dt_periods}")
        for name in ("speed_limit_max_lag_m", "speed_limit_max_lag_rad"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be > 0, got {value}")

    @property
    def period_ns(self) -> int:
        return int(round(NS_PER_S / self.rate_hz))

    def speed_limiter(self) -> SpeedLimiter:
        """The published steps' limiter these settings describe (speed_limit.py)."""
        return SpeedLimiter(
            self.max_ee_speed_m_s,
            self.max_ee_angular_speed_rad_s,
            self.speed_limit_max_dt_periods / self.rate_hz,
            self.speed_limit_max_lag_m,
            self.speed_limit_max_lag_rad,
        )


@dataclass(frozen=True)
class QueryToken:
    """Handed out when a query starts; a chunk is merged only if the generation still matches
    (a `reset` in between makes the answer to the old observation worthless)."""

    generation: int
    started_ns: int
    prefix_end_ns: int | None = None
    """blend inpaint: time of the last committed row passed to the policy (None: no prefix)."""


@dataclass(frozen=True)
class AcceptedChunk:
    """A chunk the model produced, as published on policy/chunk. late_rows: rows whose time had
    passed when it was merged (-1: superseded by a newer answer before any tick merged it)."""

    chunk_id: int
    chunk: Chunk
    received_ns: int
    late_rows: int


@dataclass(frozen=True)
class TickResult:
    status: TickStatus
    target: Target | None
    want_query: bool
    new_chunks: tuple[AcceptedChunk, ...] = ()


@dataclass
class Counters:
    ticks: int = 0
    published: int = 0
    dry_ticks: int = 0
    """Ticks that repeated the last target because the queue ran dry."""
    stopped_ticks: int = 0
    """Ticks with no target because the queue was dry for longer than max_dry_s (or open loop too long)."""
    open_loop_ticks: int = 0
    """Ticks stopped because the newest chunk's observation was older than max_open_loop_s."""
    dry_episodes: int = 0
    queries: int = 0
    query_errors: int = 0
    stale_observations: int = 0
    """Queries not made because the observation was stale or incomplete."""
    chunks: int = 0
    rejected_chunks: int = 0
    too_late_chunks: int = 0
    """Chunks whose every row was already in the past when they arrived."""
    superseded_chunks: int = 0
    """Chunks replaced by a newer answer before a tick merged them."""
    discarded_after_reset: int = 0
    rows_dropped_late: int = 0
    """Chunk rows whose time had passed when the chunk arrived (the measured latency, in rows)."""
    speed_limited: int = 0
    """Published targets moved back toward the previous one to keep within the speed limits."""
    runaway_ticks: int = 0
    """Ticks stopped because the plan ran further ahead of the speed limits than their lag bounds."""


def _row_times(stamp_ns: int, period_s: float, n: int) -> np.ndarray:
    """Times of rows 0..n-1 of a chunk answering `stamp_ns`, rounded as trajectory.from_chunk does."""
    return stamp_ns + np.round(np.arange(n, dtype=np.int64) * period_s * NS_PER_S).astype(np.int64)


def _percentile_ms(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q) / 1e6) if values else float("nan")


class ChunkScheduler:
    """Queue, cadence, alignment, blending and dry handling. Not thread-safe: the executor
    serializes calls with its lock."""

    def __init__(self, config: ExecutorConfig, delay_after_rest: bool = False):
        """`delay_after_rest`: delay a chunk merged after the arm stood still (module docstring);
        the executor turns it on for a policy that is not clock-driven."""
        self.config = config
        self._delay_after_rest = delay_after_rest
        self._period_ns = config.period_ns
        self._queue = Trajectory.empty()
        self._generation = 0
        self._in_flight = False
        self._due_tick = 0
        self._last_query_tick = -config.query_every_n_ticks  # the first tick is due
        self._retry_after_ns: int | None = None
        self._next_chunk_id = 1
        self._latencies_ns: deque[int] = deque(maxlen=config.latency_window)
        self._ages_ns: deque[int] = deque(maxlen=config.latency_window)
        self._new_chunks: list[AcceptedChunk] = []
        self._pending: tuple[int, Chunk, Trajectory, int, int | None] | None = None
        """(chunk id, chunk, its rows, received_ns, prefix_end_ns): arrived, merged by the next tick."""
        self._status = TickStatus.WAITING
        self._newest_obs_ns: int | None = None
        """Observation stamp of the newest merged chunk: how old the plan being executed is."""
        self._limiter = config.speed_limiter()
        self.counters = Counters()
        self.last_problem = ""
        """The most recent reason a query was not made, failed or was refused ("" if none)."""

    # ----------------------------------------------------------------- tick
    def tick(self, now_ns: int) -> TickResult:
        c = self.counters
        c.ticks += 1
        if self._pending is not None:
            self._merge(now_ns)
        q = self._queue
        if len(q) >= 2:
            k = int(np.searchsorted(q.t_ns, now_ns, side="right")) - 1
            if k > 0:
                q = self._queue = q.take(slice(k, None))
        target = None
        open_loop_ns = now_ns - self._newest_obs_ns if self._newest_obs_ns is not None else 0
        if len(q) == 0:
            status = TickStatus.WAITING
        elif open_loop_ns > self.config.max_open_loop_s * NS_PER_S:
            status = TickStatus.STOPPED
            c.stopped_ticks += 1
            c.open_loop_ticks += 1
            if not self.last_problem:  # keep the root cause (why no fresh query was made) if known
                self.last_problem = (
                    f"open loop: the newest chunk answers an observation {open_loop_ns / 1e6:.0f} ms old"
                )
        elif now_ns <= q.t_ns[-1]:
            if now_ns < q.t_ns[0] - self._period_ns:
                status = TickStatus.WAITING  # the queue starts in the future: an observation from ahead of now
            else:
                status, target = TickStatus.RUNNING, tj.target_at(q, now_ns)
        elif now_ns - q.t_ns[-1] <= self.config.max_dry_s * NS_PER_S:
            status, target = TickStatus.HOLDING, tj.target_at(q, int(q.t_ns[-1]))
            c.dry_ticks += 1
        else:
            status = TickStatus.STOPPED
            c.stopped_ticks += 1
        if target is not None:
            left, right, limited = self._limiter.apply(now_ns, target.left_pose, target.right_pose)
            if limited:
                target = dataclasses.replace(target, left_pose=left, right_pose=right)
                c.speed_limited += 1
            if self._limiter.runaway:
                status, target = TickStatus.STOPPED, None
                c.stopped_ticks += 1
                c.runaway_ticks += 1
                self.last_problem = f"stopped until policy/reset: {self._limiter.runaway}"
        if status in (TickStatus.HOLDING, TickStatus.STOPPED) and self._status is TickStatus.RUNNING:
            c.dry_episodes += 1
        self._status = status
        if target is not None:
            c.published += 1
        want = self.query_due(now_ns)
        if want:
            self._due_tick = c.ticks
        new, self._new_chunks = tuple(self._new_chunks), []
        return TickResult(status, target, want, new)

    def query_due(self, now_ns: int) -> bool:
        """Whether the cadence asks for a query at `now_ns` (never while one is in flight)."""
        if self._in_flight or self._limiter.runaway:  # a runaway waits for reset: no new plans meanwhile
            return False
        if self._retry_after_ns is not None and now_ns < self._retry_after_ns:
            return False
        if self._newest_obs_ns is not None and now_ns - self._newest_obs_ns >= self.config.replan_after_s * NS_PER_S:
            return True
        cadence = self.config.cadence
        if cadence == Cadence.ALWAYS:
            return True
        if cadence == Cadence.EVERY_N:
            return self.counters.ticks - self._last_query_tick >= self.config.query_every_n_ticks
        if len(self._queue) == 0:
            return True
        remaining_ns = int(self._queue.t_ns[-1]) - now_ns
        latency_ns = max(list(self._latencies_ns)[-10:], default=0)
        return remaining_ns <= latency_ns + self.config.low_water_s * NS_PER_S

    # -------------------------------------------------------------- queries
    def expected_latency_ns(self) -> int:
        """What the next answer is expected to take: the max of the last 10 measured queries."""
        return max(list(self._latencies_ns)[-10:], default=0)

    def inpaint_prefix(self, observation_stamp_ns: int, now_ns: int) -> Chunk | None:
        """blend inpaint: the committed rows answering an observation stamped
        `observation_stamp_ns`, queried at `now_ns`: the queue evaluated at stamp + i * period
        for every row before the expected merge (now + expected latency + one period), within
        the queue (never past its last row: what comes after is not committed). None when the
        blend is not inpaint or nothing is committed."""
        if self.config.blend != Blend.INPAINT or len(self._queue) == 0:
            return None
        q = self._queue
        horizon_ns = min(now_ns + self.expected_latency_ns() + self._period_ns, int(q.t_ns[-1]))
        if horizon_ns < observation_stamp_ns:
            return None
        period_s = 1.0 / self.config.rate_hz
        n = int((horizon_ns - observation_stamp_ns) // self._period_ns) + 1
        times = _row_times(int(observation_stamp_ns), period_s, n)  # where the answer's rows will lie
        left, right, lg, rg = tj.sample(q, times)
        return Chunk(
            observation_stamp_ns=int(observation_stamp_ns),
            period_s=period_s,
            left_pose=left,
            right_pose=right,
            left_gripper=lg,
            right_gripper=rg,
        )

    def query_started(self, now_ns: int, prefix: Chunk | None = None) -> QueryToken:
        """A query starts at `now_ns`; `prefix`: the committed rows passed with it (inpaint)."""
        self._in_flight = True
        self._last_query_tick = self._due_tick  # every_n counts from the tick that asked
        self.counters.queries += 1
        prefix_end_ns = None
        if prefix is not None and len(prefix):
            prefix_end_ns = int(_row_times(int(prefix.observation_stamp_ns), prefix.period_s, len(prefix))[-1])
        return QueryToken(self._generation, now_ns, prefix_end_ns)

    def query_skipped(self, reason: str) -> None:
        """No query: the observation is stale or incomplete (never queried with old inputs)."""
        self.counters.stale_observations += 1
        self.last_problem = reason

    def query_failed(self, token: QueryToken, reason: str, now_ns: int) -> None:
        self._in_flight = False
        self.counters.query_errors += 1
        self.last_problem = reason
        self._retry_after_ns = now_ns + int(self.config.retry_backoff_s * NS_PER_S)

    def accept(self, token: QueryToken, chunk: Chunk, now_ns: int) -> int | None:
        """Take the chunk answering the query `token`, arrived at `now_ns`; the next tick merges
        it. Returns its chunk id, or None when it is refused or answers a pre-reset query."""
        self._in_flight = False
        c = self.counters
        if token.generation != self._generation:
            c.discarded_after_reset += 1
            return None
        self._latencies_ns.append(now_ns - token.started_ns)
        try:
            rows = tj.from_chunk(chunk, self._next_chunk_id, self.config.commit_rows)
        except PoseError as exc:
            c.rejected_chunks += 1
            self.last_problem = f"chunk refused: {exc}"
            self._retry_after_ns = now_ns + int(self.config.retry_backoff_s * NS_PER_S)
            return None
        chunk_id = self._next_chunk_id
        self._next_chunk_id += 1
        c.chunks += 1
        self._ages_ns.append(now_ns - int(chunk.observation_stamp_ns))
        if self._pending is not None:
            old_id, old_chunk, _, old_received, _ = self._pending
            c.superseded_chunks += 1
            self._new_chunks.append(AcceptedChunk(old_id, old_chunk, old_received, -1))
        self._pending = (chunk_id, chunk, rows, now_ns, token.prefix_end_ns)
        return chunk_id

    def _merge(self, now_ns: int) -> None:
        if self._pending is None:  # called when a chunk is pending; nothing to merge otherwise
            return
        chunk_id, chunk, new, received_ns, prefix_end_ns = self._pending
        self._pending = None
        if self._delay_after_rest:
            new = new.delayed(self._still_ns(int(chunk.observation_stamp_ns), now_ns))
        c = self.counters
        late = int(np.count_nonzero(new.t_ns < now_ns))
        c.rows_dropped_late += late
        self._new_chunks.append(AcceptedChunk(chunk_id, chunk, received_ns, late))
        if new.t_ns[-1] < now_ns:
            c.too_late_chunks += 1
            self.last_problem = (
                f"chunk {chunk_id} arrived after its last row ({(now_ns - new.t_ns[-1]) / 1e6:.0f} ms late)"
            )
            return
        new = new.take(slice(max(late - 1, 0), None))  # keep one past row to interpolate up to now
        self._newest_obs_ns = max(self._newest_obs_ns or 0, int(chunk.observation_stamp_ns))
        old = self._queue
        if len(old):
            prefix = old.take(old.t_ns < new.t_ns[0])
            new = tj.blend_into(new, old, self._weights_old(new, old, now_ns, prefix_end_ns))
            self._queue = tj.concat(prefix, new)
        else:
            self._queue = new

    def _still_ns(self, observation_stamp_ns: int, now_ns: int) -> int:
        """How long the arm has stood still since the observation: from the later of the
        observation and the queue's last row (the target held once it ran dry) to `now`; 0 while
        the queue still covers `now` (the arm is moving along it)."""
        if not len(self._queue):
            return max(now_ns - observation_stamp_ns, 0)
        end_ns = int(self._queue.t_ns[-1])
        return 0 if end_ns >= now_ns else max(now_ns - max(observation_stamp_ns, end_ns), 0)

    def _weights_old(
        self, new: Trajectory, old: Trajectory, now_ns: int, prefix_end_ns: int | None = None
    ) -> np.ndarray:
        blend = self.config.blend
        if blend == Blend.NONE:
            return np.zeros(len(new))
        if blend == Blend.ENSEMBLE:
            return np.where(new.t_ns <= old.t_ns[-1], self.config.ensemble_weight, 0.0)
        start = max(now_ns, int(new.t_ns[0]))
        if blend == Blend.INPAINT and prefix_end_ns is not None:
            start = max(start, min(prefix_end_ns, int(old.t_ns[-1])))  # committed rows: weight 1 up to here
        length = self.config.crossfade_rows * self._period_ns
        return np.clip((start + length - new.t_ns) / length, 0.0, 1.0)

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        """Clear the queue; an answer still in flight is discarded when it arrives."""
        self._generation += 1
        self._queue = Trajectory.empty()
        self._limiter.reset()
        self._newest_obs_ns = None
        if self._pending is not None:
            self.counters.discarded_after_reset += 1
            self._pending = None
        self._last_query_tick = self.counters.ticks - self.config.query_every_n_ticks
        self._retry_after_ns = None
        self._status = TickStatus.WAITING

    @property
    def in_flight(self) -> bool:
        return self._in_flight

    def queue_remaining_s(self, now_ns: int) -> float:
        return max(int(self._queue.t_ns[-1]) - now_ns, 0) / NS_PER_S if len(self._queue) else 0.0

    def stats(self, now_ns: int) -> dict:
        """A flat snapshot for diagnostics and benchmarks."""
        out = dict(vars(self.counters))
        out.update(
            status=self._status.value,
            queue_rows=int(np.count_nonzero(self._queue.t_ns >= now_ns)),
            queue_s=round(self.queue_remaining_s(now_ns), 4),
            in_flight=self._in_flight,
            latency_p50_ms=round(_percentile_ms(self._latencies_ns, 50), 2),
            latency_max_ms=round(max(self._latencies_ns, default=0) / 1e6, 2),
            observation_age_p50_ms=round(_percentile_ms(self._ages_ns, 50), 2),
            last_problem=self.last_problem,
        )
        return out
