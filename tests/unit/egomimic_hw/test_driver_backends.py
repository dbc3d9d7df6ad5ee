"""The driver's backend table: each name opens its controller from a typed config, unknown names
list the choices, and the SDK stays out of every process that does not choose arx5."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from egomimic_hw.description import Arm
from egomimic_hw.driver.arx5 import Arx5Config
from egomimic_hw.driver.backends import BACKENDS, open_controller
from egomimic_hw.driver.calibration import resolve_gripper_calibration
from egomimic_hw.driver.sim import SimArx5Controller, SimConfig
from egomimic_hw.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[3]


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_unknown_backends_are_refused_with_the_choices():
    assert BACKENDS == ("sim", "arx5")
    with pytest.raises(ConfigError, match=r"unknown driver backend 'mujoco'; choices: \['sim', 'arx5'\]"):
        open_controller("mujoco")
    with pytest.raises(ConfigError, match=r"choices: \['sim', 'arx5'\]"):
        resolve_gripper_calibration(Arm.LEFT, "mujoco")


def test_sim_runs_the_given_config_with_the_given_seed():
    config = SimConfig(initial_joints_rad=(0.1, 0.9, 0.8, -0.2, 0.1, 0.0), joint_noise_std_rad=1e-3)
    ctrl = open_controller("sim", sim=config, seed=7)
    assert isinstance(ctrl, SimArx5Controller) and ctrl.config is config
    same, other = open_controller("sim", sim=config, seed=7), open_controller("sim", sim=config, seed=8)
    a, b, c = (x.read(0.01).joints_rad for x in (ctrl, same, other))
    assert np.allclose(a, config.initial_joints_rad, atol=1e-2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_arx5_needs_its_config_and_refuses_a_non_can_interface_before_any_sdk_call():
    with pytest.raises(ConfigError, match="needs an Arx5Config"):
        open_controller("arx5")
    with pytest.raises(ConfigError, match="only SocketCAN names"):
        open_controller("arx5", arx5=Arx5Config("eth0"))


def test_neither_the_contract_nor_the_table_imports_the_hardware_backend():
    out = run_python(
        "import sys\n"
        "import egomimic_hw.driver.base\n"
        "assert not {'egomimic_hw.driver.sim', 'egomimic_hw.driver.arx5'} & set(sys.modules), 'base imports a backend'\n"
        "from egomimic_hw.driver.backends import open_controller\n"
        "open_controller('sim').read(0.01)\n"
        "loaded = {'egomimic_hw.driver.arx5', 'arx5_interface'} & set(sys.modules)\n"
        "assert not loaded, f'sim loaded {loaded}'\n"
        "print('ok')\n"
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_missing_sdk_is_reported_with_its_fix():
    out = run_python(
        "import sys\n"
        "sys.modules['arx5_interface'] = None  # what an interpreter without the wheel sees\n"
        "from egomimic_hw.driver.arx5 import Arx5Config\n"
        "from egomimic_hw.driver.backends import open_controller\n"
        "from egomimic_hw.errors import BackendUnavailable\n"
        "try:\n"
        "    open_controller('arx5', arx5=Arx5Config('can1'))\n"
        "except BackendUnavailable as exc:\n"
        "    print(exc)\n"
    )
    assert out.returncode == 0, out.stderr
    assert "arx5_interface" in out.stdout and "is not importable" in out.stdout and "make setup" in out.stdout, (
        out.stdout
    )
