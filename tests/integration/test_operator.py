"""egomimic-operator against the running sim graph (scripted policy, auto_arm:=false, recorder
on), driven headless with textual's pilot: `a` arms the gate (ARMED on screen), `e` e-stops it
(ESTOP on screen), and every stream of the table is live.

The screen at ARMED is saved as SVG under the test's tmp dir; with
EGOMIMIC_OPERATOR_SCREENSHOT=docs/images/operator.svg it also refreshes the README's picture.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONAL_CAMERAS = f"params_file:={REPO_ROOT / 'tests' / 'integration' / 'functional_cameras.yaml'}"
"""The console's function at 320x240 cameras (functional_cameras.yaml says why): at 640x480 with
recording, a fresh clone's run held on STALE_CAMERA (front_1 301 ms old) before it could arm."""
GRAPH_UP_S = 60.0
"""The gate's first (latched) status: the whole graph started (2-core machine, other tests around)."""
ARMED_S = 20.0
"""safety/arm -> ARMED: the arming checks need fresh state, cameras and the policy's first command."""


RECORDING_S = 15.0
"""The recorder (started last) up: its latched status."""


def gate_state(app) -> str:
    return app.snap.gate.state if app.snap is not None and app.snap.gate is not None else ""


def test_operator_arms_and_estops_the_sim_graph(tmp_path):
    from egomimic_launch.operator.app import OperatorApp
    from egomimic_launch.operator.link import GraphLink
    from egomimic_launch.operator.model import OperatorModel
    from egomimic_nodes import topics

    log = open(tmp_path / "launch.log", "w")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "egomimic_launch.cli", "eva_bimanual.launch.py", "auto_arm:=false", "record:=true"]
        + [f"record_dir:={tmp_path / 'episodes'}", FUNCTIONAL_CAMERAS, "--quiet", "--run-dir", str(tmp_path / "run")],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    link = GraphLink(OperatorModel("eva", record_dir=tmp_path))
    screens: dict[str, str] = {}

    async def drive() -> None:
        app = OperatorApp(link, refresh_s=0.1)
        async with app.run_test(size=(130, 40)) as pilot:

            async def wait_state(state: str, timeout_s: float) -> bool:
                for _ in range(int(timeout_s / 0.1)):
                    await pilot.pause(0.1)
                    if gate_state(app) == state and f" {state} " in str(app.main_screen.query_one("#gate").content):
                        return True
                    assert launcher.poll() is None, f"the graph exited: see {log.name}"
                return False

            assert await wait_state("DISARMED", GRAPH_UP_S), "no gate status from the graph"

            async def action_since(t: float, timeout_s: float) -> bool:
                """A policy/action received after `t` (wall clock), within timeout_s."""
                for _ in range(int(timeout_s / 0.1)):
                    await pilot.pause(0.1)
                    row = next(r for r in app.snap.streams if r.label == topics.POLICY_ACTION.name())
                    if row.age_s is not None and time.time() - row.age_s > t:
                        return True
                return False

            # As the trial runner arms (egomimic_launch.trials): once the policy's actions flow,
            # reset it so that its path starts at the measured pose (an open-loop scripted path
            # armed late is refused: START_TOO_FAR), then press `a`; a refusal while a stream is
            # not yet fresh is retried, as auto_arm retries.
            assert await action_since(0.0, GRAPH_UP_S), "the policy node never published"
            deadline = time.monotonic() + ARMED_S
            armed = False
            while not armed and time.monotonic() < deadline:
                if gate_state(app) in ("HOLD", "ESTOP"):
                    await pilot.press("r")
                    assert await wait_state("DISARMED", 5.0), f"reset: {app.snap.gate}"
                t_reset = time.time()
                assert link.client.trigger(topics.POLICY_RESET.resolve("eva"))[0], "the policy reset service"
                assert await action_since(t_reset, 10.0), "no policy/action after policy/reset"
                await pilot.press("a")
                armed = await wait_state("ARMED", 3.0)
            assert armed, f"not ARMED: {app.snap.gate}"
            await pilot.pause(0.5)  # the call's answer on the last line, half a second of rates
            screens["armed"] = app.save_screenshot(path=str(tmp_path), filename="operator.svg")
            stale = [row.label for row in app.snap.streams if row.age_s is None or row.age_s > 1.0]
            assert not stale, f"streams not live on the console: {stale}"
            for _ in range(int(RECORDING_S / 0.1)):  # the recorder starts last
                await pilot.pause(0.1)
                if app.snap.recorder is not None and app.snap.policy is not None:
                    break
            assert app.snap.policy is not None and app.snap.recorder is not None
            await pilot.press("e")
            assert await wait_state("ESTOP", 5.0), f"not ESTOP: {app.snap.gate}"

    try:
        asyncio.run(drive())
    finally:
        link.close()
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(40)
            except subprocess.TimeoutExpired:
                for child in psutil.Process(launcher.pid).children(recursive=True):
                    child.kill()
                launcher.kill()
                launcher.wait()
        log.close()
    target = os.environ.get("EGOMIMIC_OPERATOR_SCREENSHOT")
    if target:
        Path(target).write_text(Path(screens["armed"]).read_text())
