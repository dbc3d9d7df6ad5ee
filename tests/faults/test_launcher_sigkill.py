"""The launcher SIGKILLed while the graph is armed and commanding: the gate latches ESTOP and
sends its hold, the drivers hold, every node is gone within 3 s, nothing moves. Each trial gets
its own graph (its own module, so no other graph shares the namespace and domain)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import psutil
import pytest

from egomimic_hw.description import ARMS, CAMERAS
from egomimic_safety.checks import joint_bounds

from .conftest import RESULTS, TrialResult
from .rig import Rig
from .test_gate_faults import (
    ESTOP_CALLS,
    arm_and_stream,
    assert_estop_fast,
    assert_estop_round_trip,
    assert_no_motion,
    motion_bound,
    trials,
)
from .test_launcher_faults import wait_cameras

pytestmark = pytest.mark.integration


def _start_armed_graph(tmp, rng) -> Rig:
    r = Rig(tmp, CAMERAS)
    assert r.wait_ready(90), (tmp / "launch.log").read_text()[-3000:]
    wait_cameras(r, tmp / "launch.log")
    arm_and_stream(r, rng)
    return r


def assert_held(rig, arm, t_fault: float, t_gone: float, lo, hi) -> None:
    """After the launcher's death the gate sent a hold: a command equal to a measured sample
    (clamped), as the gate holds the last plausible measurement it received. The driver exits
    at once too, and this rig (a busier process than the gate) may never receive the samples it
    published in its last milliseconds: DDS drops a reader's untaken samples of a writer that
    has left. The gate may hold one of those, so a hold within one control period of motion
    (motion_bound) of the newest sample this rig has before the kill is accepted as well."""
    measured = [
        np.append(np.clip(j.positions[:6], lo, hi), np.clip(j.positions[6], 0.0, 1.0))
        for j in rig.joint_samples(arm, t_fault - 0.2, t_gone)
    ]
    after = [c for c in rig.commands_since(t_fault) if c.arm == arm]
    if any(np.array_equal(c.values, m) for c in after for m in measured):
        return
    samples = rig.joint_samples(arm, t_fault - 2.0, t_fault, wait_s=0.0)
    assert samples, f"launcher_sigkill: {arm.value}: no measured sample before the kill"
    newest = samples[-1]
    bound = motion_bound(rig, arm, t_fault - 0.5, t_fault)
    gaps = [float(np.max(np.abs(c.values[:6] - np.clip(newest.positions[:6], lo, hi)))) for c in after]
    assert any(g <= bound for g in gaps), (
        f"launcher_sigkill: {arm.value}: no hold command after the launcher died: {len(after)} commands received after "
        f"the kill (stamps {[round(c.stamp_s - t_fault, 3) for c in after][:8]} s from it, {np.round(gaps, 5).tolist()[:8]} rad "
        f"from the newest sample, one control period {bound:.5f} rad), {len(measured)} measured samples in the window, "
        f"newest at {newest.stamp_s - t_fault:+.3f} s (received {newest.recv_s - t_fault:+.3f} s); samples refused as "
        f"from unknown writers: {rig.state_source[arm].unknown}, foreign: {rig.state_source[arm].refused}"
    )


def exited(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_exited(procs: list[psutil.Process], timeout_s: float) -> tuple[dict[str, float], list[psutil.Process]]:
    """When each process ended (wall clock, by name), and those still running after timeout_s.
    Polled: psutil.wait_procs waits for the reaping too, which init may do seconds later."""
    names = {p.pid: node_name(p) for p in procs}
    gone_at: dict[str, float] = {}
    running = list(procs)
    deadline = time.time() + timeout_s
    while running and time.time() < deadline:
        for p in [p for p in running if exited(p)]:
            gone_at[names[p.pid]] = time.time()
            running.remove(p)
        time.sleep(0.01)
    return gone_at, running


def stacks_of(procs: list[psutil.Process], run_dir) -> dict[str, str]:
    """Every thread's Python stack of each process still alive, from its log (SIGUSR1:
    spin.dump_stacks_on_sigusr1), waited for up to a second: what held its exit."""
    sizes = {}
    for p in procs:
        log = run_dir / "logs" / f"{node_name(p)}.log"
        sizes[p.pid] = log.stat().st_size if log.is_file() else 0
        try:
            p.send_signal(signal.SIGUSR1)
        except psutil.Error:
            pass
    deadline = time.time() + 1.0
    out: dict[str, str] = {}
    while time.time() < deadline and len(out) < len(procs):
        for p in procs:
            log = run_dir / "logs" / f"{node_name(p)}.log"
            if node_name(p) not in out and log.is_file() and log.stat().st_size > sizes[p.pid]:
                time.sleep(0.05)  # the dump is written in a few writes
                with open(log, "rb") as f:
                    f.seek(sizes[p.pid])
                    out[node_name(p)] = f.read().decode(errors="replace")[-3000:]
        time.sleep(0.02)
    return out


def own_last_lines(run_dir, name: str) -> list[str]:
    """What node `name` wrote to its log itself once its launcher was gone (spin.output_to_log_file):
    from the line that says so to the end."""
    try:
        lines = (run_dir / "logs" / f"{name}.log").read_text(errors="replace").splitlines()
    except OSError:
        return []
    from egomimic_nodes.spin import LAST_WORDS

    start = next((i for i, line in enumerate(lines) if LAST_WORDS in line), None)
    return [] if start is None else lines[start:]


def node_name(proc: psutil.Process) -> str:
    try:
        return next((a.split(":=", 1)[1] for a in proc.cmdline() if a.startswith("__node:=")), str(proc.pid))
    except psutil.Error:
        return str(proc.pid)


def test_launcher_sigkill_stops_the_whole_graph_safely(tmp_path):
    """SIGKILL the launcher while armed and commanding: no orphan is left after 3 s, the gate
    announced ESTOP and held, nothing outside the limits reached a driver, and the arms did not
    move beyond one control period of their measured trajectory."""
    for i, rng in enumerate(trials("launcher_sigkill")):
        tmp = tmp_path / f"trial{i}"
        tmp.mkdir()
        rig = _start_armed_graph(tmp, rng)
        try:
            t_start = rig.armed_stamp_s
            estop_before = rig.estop_latencies(ESTOP_CALLS)  # e-stop latency while armed (state ESTOP after)
            gate_before, paths_before = rig.last_estop_gate_s, rig.last_estop_paths
            rig.call("reset")
            arm_and_stream(rig, rng)
            nodes = list(psutil.Process(rig.launcher.pid).children(recursive=True))
            assert len(nodes) >= 5, [p.cmdline() for p in nodes]
            t_fault = time.time()
            os.kill(rig.launcher.pid, signal.SIGKILL)
            rig.launcher.wait()
            gone_at, alive = wait_exited(nodes, 3.0)
            t_gone = max(gone_at.values(), default=time.time())
            names = [node_name(p) for p in alive]
            stacks = stacks_of(alive, rig.run_dir) if alive else {}
            for p in alive:
                p.kill()
            assert not alive, (
                f"launcher_sigkill: nodes alive 3 s after the launcher died: {names}; their own last lines: "
                f"{ {n: own_last_lines(rig.run_dir, n) for n in names} }; their stacks then: {stacks}"
            )
            silent = [n for n in gone_at if n.isidentifier() and not own_last_lines(rig.run_dir, n)]
            assert not silent, f"launcher_sigkill: nodes that left no line of their own after the kill: {silent}"
            rig.stop_stream()
            estop = rig.wait_state({"ESTOP"}, t_fault - 0.001, 1.0)
            assert estop is not None, f"launcher_sigkill: the gate did not announce ESTOP: {rig.statuses[-1]}"
            lo, hi = joint_bounds(rig.config)
            for arm in ARMS:
                assert_held(rig, arm, t_fault, t_gone, lo, hi)
            assert_no_motion(rig, "launcher_sigkill", t_fault, t_gone, may_fall_silent=True)
            cmds = rig.commands_since(t_start)
            bad = [c for c in cmds if c.violations]
            RESULTS.append(
                TrialResult(
                    "launcher_sigkill",
                    "ESTOP",
                    estop.reason,
                    estop.stamp_s - t_fault,
                    estop.recv_s - t_fault,
                    len(cmds),
                    len(bad),
                    [v for c in bad for v in c.violations][:3],
                    note=f"all {len(nodes)} nodes gone {t_gone - t_fault:.2f} s after the kill, last "
                    f"{max(gone_at, key=gone_at.get)}",
                ).with_estop(estop_before, gate_before, paths_before)
            )
            assert not bad, f"launcher_sigkill: commands outside limits: {RESULTS[-1].examples}"
            assert_estop_fast("launcher_sigkill", estop_before, gate_before)
        finally:
            rig.close()
    assert_estop_round_trip("launcher_sigkill")
