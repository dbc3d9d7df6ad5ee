"""Asynchronous chunk execution: the control tick never waits for the model.

Why a worker thread: a model query takes longer than a control period (Fold: ~100 ms at 16
steps on a 4090, docs/eva.md); upstream queries inline, so the 30 Hz loop stalls at every replan.
Here `tick(now_ns)` only evaluates the queue (microseconds, under a lock never held while the
model runs) and, when the cadence says so, wakes the worker. The worker takes the latest
observation from `observe(now_ns)`, calls `policy.infer`, measures the latency and hands the
chunk to the scheduler, which aligns it to its observation and merges it.

`observe` raises ObservationUnavailable (with the reason) when an input is stale or missing:
the query is skipped and counted, never made with old inputs. With blend `inpaint` the worker
attaches the committed prefix (the queue rows the answer cannot change, ChunkScheduler.
inpaint_prefix) to the observation as Observation.prefix before calling the policy. `policy.reset()` runs on the
worker thread too, so a policy is never reset while it infers.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from egomimic_policy.interface import ChunkPolicy, Observation
from egomimic_policy.rollout.scheduler import ChunkScheduler, ExecutorConfig, TickResult


class ObservationUnavailable(Exception):
    """No fresh, complete observation now; the message says which input and why."""


class AsyncChunkExecutor:
    """A ChunkScheduler driven by the caller's tick and fed by one worker thread."""

    def __init__(
        self,
        policy: ChunkPolicy,
        config: ExecutorConfig,
        observe: Callable[[int], Observation],
        clock_ns: Callable[[], int] = time.time_ns,
        *,
        start: bool = True,
        on_worker_start: Callable[[], None] | None = None,
    ):
        """`on_worker_start`: called first thing in the worker thread (the ROS node lowers the
        worker's scheduling priority there: the tick is on the control path, the model is not)."""
        self.policy = policy
        self._on_worker_start = on_worker_start
        self.config = config
        self._observe = observe
        self._clock_ns = clock_ns
        self._scheduler = ChunkScheduler(config, delay_after_rest=not policy.spec.clock_driven)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._reset_pending = False
        self._thread = threading.Thread(target=self._run, name="chunk-executor-worker", daemon=True)
        if start:
            self._thread.start()

    @property
    def worker_native_id(self) -> int | None:
        """The worker thread's kernel id once started (None before): its scheduling priority."""
        return self._thread.native_id

    def tick(self, now_ns: int) -> TickResult:
        """The target for `now_ns` (or a status without one). Never blocks on the model."""
        with self._lock:
            result = self._scheduler.tick(now_ns)
        if result.want_query:
            self._wake.set()
        return result

    def reset(self) -> None:
        """Clear the queue now; the policy forgets its window before its next query."""
        with self._lock:
            self._scheduler.reset()
            self._reset_pending = True
        self._wake.set()

    def stats(self, now_ns: int) -> dict:
        with self._lock:
            return self._scheduler.stats(now_ns)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the worker; a query still running is abandoned (the thread is a daemon)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # ------------------------------------------------------------- worker
    def _run(self) -> None:
        if self._on_worker_start is not None:
            self._on_worker_start()
        while not self._stop.is_set():
            if not self._wake.wait(0.5):
                continue  # only a tick (or a reset) starts work: no ticks, no queries
            self._wake.clear()
            if self._stop.is_set():
                return
            self._query_once()

    def _query_once(self) -> None:
        with self._lock:
            reset = self._reset_pending
            self._reset_pending = False
        if reset:
            try:
                self.policy.reset()
            except Exception as exc:  # noqa: BLE001 - a failed reset is reported, then retried
                with self._lock:
                    self._reset_pending = True
                    self._scheduler.query_skipped(f"policy reset failed: {type(exc).__name__}: {exc}")
                return
        now_ns = self._clock_ns()
        with self._lock:
            if not self._scheduler.query_due(now_ns):
                return
        try:
            observation = self._observe(now_ns)  # outside the lock: the tick never waits for it
        except ObservationUnavailable as exc:
            with self._lock:
                self._scheduler.query_skipped(str(exc))
            return
        with self._lock:
            prefix = self._scheduler.inpaint_prefix(int(observation.stamp_ns), self._clock_ns())
            token = self._scheduler.query_started(now_ns, prefix)
        if prefix is not None:
            observation = dataclasses.replace(observation, prefix=prefix)
        try:
            chunk = self.policy.infer(observation)
        except Exception as exc:  # noqa: BLE001 - any model or transport failure drains the queue, never the tick
            with self._lock:
                self._scheduler.query_failed(token, f"{type(exc).__name__}: {exc}", self._clock_ns())
            return
        with self._lock:
            self._scheduler.accept(token, chunk, self._clock_ns())
