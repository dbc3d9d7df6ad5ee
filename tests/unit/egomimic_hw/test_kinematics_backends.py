"""The two kinematics backends against each other, and how one is chosen.

The SDK's solver is the reference: Pinocchio must compute the same link6 pose on the same URDF
(to 1e-9 m / 1e-9 rad over the whole joint range) and solve IK as well from the same seeds.
Comparisons need both backends and skip where the SDK wheel is absent (Python != 3.11)."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import egomimic_hw.kinematics as kinematics
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.kinematics import KINEMATICS_ENV, ArmKinematics, SdkArm
from egomimic_hw.pinocchio_kinematics import urdf_text
from egomimic_hw.rotations import quat_to_mat

from .sdk_marks import requires_sdk

WORK = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])
FK_CONFIGURATIONS = 10_000


def rotation_angle(mat_a: np.ndarray, mat_b: np.ndarray) -> np.ndarray:
    """Angle between rotations from the chord ||A - B||_F = 2 sqrt(2) sin(angle / 2): exact to
    ~1e-16 near zero, where `geodesic_angle`'s arccos of the trace resolves only ~1e-8 rad."""
    chord = np.linalg.norm(mat_a - mat_b, axis=(-2, -1))
    return 2.0 * np.arcsin(np.clip(chord / (2.0 * np.sqrt(2.0)), 0.0, 1.0))


@pytest.fixture(scope="module")
def both():
    return ArmKinematics(backend="sdk"), ArmKinematics(backend="pinocchio")


@requires_sdk
def test_the_shipped_urdf_is_the_sdks():
    assert urdf_text() == Path(SdkArm().urdf_path).read_text()


@requires_sdk
def test_fk_agrees_on_random_configurations_over_the_joint_limits(both):
    sdk, pin = both
    q = np.random.default_rng(0).uniform(sdk.joint_pos_min, sdk.joint_pos_max, (FK_CONFIGURATIONS, 6))
    a = np.array([sdk.forward(x) for x in q])
    b = np.array([pin.forward(x) for x in q])
    position_error_m = np.linalg.norm(a[:, :3] - b[:, :3], axis=1)
    rotation_error_rad = rotation_angle(quat_to_mat(a[:, 3:]), quat_to_mat(b[:, 3:]))
    assert position_error_m.max() <= 1e-9, q[position_error_m.argmax()]
    assert rotation_error_rad.max() <= 1e-9, q[rotation_error_rad.argmax()]


@requires_sdk
@pytest.mark.parametrize("seed_spread_rad", [0.02, 0.3])
def test_ik_reaches_the_same_targets_from_the_same_seeds(both, seed_spread_rad):
    """Reachable targets around the work pose, seeds one policy step (0.02 rad) or 0.3 rad per
    joint away: both backends pass the same residual check on every one."""
    rng = np.random.default_rng(2)
    sdk = both[0]
    lo, hi = sdk.joint_pos_min, sdk.joint_pos_max
    for _ in range(100):
        solution = np.clip(WORK + rng.uniform(-0.3, 0.3, 6), lo, hi)
        seed = np.clip(solution + rng.uniform(-seed_spread_rad, seed_spread_rad, 6), lo, hi)
        target = sdk.forward(solution)
        for kin in both:
            result = kin.inverse(target, seed)
            assert result.ok, f"{kin.backend}: {result.detail} for target {target}, seed {seed}"


# -- selection ----------------------------------------------------------------------------------


@requires_sdk
def test_auto_prefers_the_sdk_and_logs_it(caplog, monkeypatch):
    monkeypatch.delenv(KINEMATICS_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger="egomimic_hw.kinematics"):
        kin = ArmKinematics()
    assert kin.backend == "sdk" and kin.backend_reason.startswith("auto")
    assert "kinematics backend sdk" in caplog.text


def test_auto_falls_back_to_pinocchio_without_the_sdk(caplog, monkeypatch):
    def no_sdk():
        raise BackendUnavailable("arx5_interface is not importable: no wheel for this Python")

    monkeypatch.delenv(KINEMATICS_ENV, raising=False)
    monkeypatch.setattr(kinematics, "import_arx5", no_sdk)
    with caplog.at_level(logging.INFO, logger="egomimic_hw.kinematics"):
        kin = ArmKinematics()
    assert kin.backend == "pinocchio" and "no wheel for this Python" in kin.backend_reason
    assert "kinematics backend pinocchio" in caplog.text


def test_the_environment_pins_the_backend_and_an_argument_beats_it(monkeypatch):
    monkeypatch.setenv(KINEMATICS_ENV, "pinocchio")
    assert ArmKinematics().backend == "pinocchio"
    monkeypatch.setenv(KINEMATICS_ENV, "sdk")
    assert ArmKinematics(backend="pinocchio").backend == "pinocchio"


def test_a_pinned_sdk_without_the_sdk_is_an_error_not_a_fallback(monkeypatch):
    def no_sdk():
        raise BackendUnavailable("arx5_interface is not importable")

    monkeypatch.setattr(kinematics, "import_arx5", no_sdk)
    with pytest.raises(BackendUnavailable):
        ArmKinematics(backend="sdk")


@pytest.mark.parametrize("name", ["kdl", "SDK2", " "])
def test_unknown_backend_names_list_the_choices(name):
    with pytest.raises(ConfigError, match=r"choices: \['auto', 'sdk', 'pinocchio'\]"):
        ArmKinematics(backend=name)


def test_an_unknown_name_in_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv(KINEMATICS_ENV, "kdl")
    with pytest.raises(ConfigError, match="unknown kinematics backend 'kdl'"):
        ArmKinematics()


def test_libraries_import_and_solve_where_the_sdk_cannot_be_imported():
    """A fresh interpreter in which `import arx5_interface` fails: the libraries, the sim driver
    and the gate import, and kinematics run on Pinocchio at link6."""
    code = (
        "import sys; sys.modules['arx5_interface'] = None\n"
        "import numpy as np\n"
        "import egomimic_hw.driver.arx5, egomimic_hw.driver.sim, egomimic_safety.gate, egomimic_safety.oracle\n"
        "from egomimic_hw.kinematics import ArmKinematics\n"
        "kin = ArmKinematics()\n"
        "assert kin.backend == 'pinocchio', kin.backend\n"
        "print(*kin.forward(np.zeros(6))[:3])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != KINEMATICS_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert np.allclose([float(v) for v in out.stdout.split()], [0.0952, 0.001, 0.1565], atol=1e-4)
