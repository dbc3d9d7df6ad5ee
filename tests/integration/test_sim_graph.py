"""The whole simulated EVA graph as real processes over DDS, started by egomimic-launch."""

import pytest

from .conftest import run_launch

pytestmark = pytest.mark.integration


def test_closed_loop_runs_at_nominal_rates_and_tracks(tmp_path):
    rc, summary, out = run_launch(tmp_path, "--duration", "12")
    assert summary is not None, out[-3000:]
    failed = [c["check"] for c in summary["checks"] if not c["ok"]]
    assert rc == 0 and summary["loop_ran"], f"failed checks: {failed}\n{out[-3000:]}"
    assert summary["gate"]["forwarded"] > 100 and summary["gate"]["rejected"] == 0
    assert "ARMED" in summary["gate_states_seen"]
    assert any(c["check"] == "safety gate armed and never held" and c["ok"] for c in summary["checks"])
    for track in summary["tracking"]:
        assert track["rms_error_m"] < 0.005 and track["commanded_span_m"] > 0.05


@pytest.mark.parametrize("victim", ["policy", "driver_right"])
def test_killing_a_node_ends_in_a_safe_stop(tmp_path, victim):
    rc, summary, out = run_launch(tmp_path, "--duration", "30", "--kill-after", f"{victim}:5", timeout_s=90)
    assert rc == 3, out[-3000:]
    assert summary["dead_node"][0] == victim
    states = summary["gate_states_seen"]
    assert states[-1] in ("HOLD", "ESTOP"), states  # never resumes, never back to ARMED
    assert "ARMED" in states
    assert summary["stop_reason"].startswith(f"required node {victim} exited")


def test_bad_launch_argument_is_refused(tmp_path):
    rc, summary, out = run_launch(tmp_path, "backend:=robot", "--duration", "1", timeout_s=30)
    assert rc == 2 and "backend:='robot' is not one of" in out and summary is None
