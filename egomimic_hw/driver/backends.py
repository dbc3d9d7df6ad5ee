"""Arm controller backend selection: one explicit table keyed by the `backend` launch argument.

Each opener takes its backend's typed config. `sim` needs nothing beyond numpy; `arx5` is
imported only when chosen, and it imports the ARX SDK only when a controller is built, raising
BackendUnavailable with the install command where the SDK is missing, so every other backend
runs where the SDK cannot be installed. Unknown names raise with the choices. A grep for a
backend name finds it here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from egomimic_hw.driver.base import ArmController
from egomimic_hw.driver.sim import SimConfig
from egomimic_hw.errors import ConfigError

if TYPE_CHECKING:
    from egomimic_hw.driver.arx5 import Arx5Config


def _open_sim(sim: SimConfig, seed: int, arx5: Arx5Config | None) -> ArmController:
    from egomimic_hw.driver.sim import SimArx5Controller

    return SimArx5Controller(sim, seed=seed)


def _open_arx5(sim: SimConfig, seed: int, arx5: Arx5Config | None) -> ArmController:
    from egomimic_hw.driver.arx5 import Arx5Controller

    if arx5 is None:
        raise ConfigError("the arx5 backend needs an Arx5Config (its CAN interface, gains and preview)")
    return Arx5Controller(arx5.can_interface, gains=arx5.gains, preview_s=arx5.preview_s)


OPENERS = {
    "sim": _open_sim,
    "arx5": _open_arx5,
}
BACKENDS = tuple(OPENERS)


def open_controller(
    backend: str, *, sim: SimConfig | None = None, seed: int = 0, arx5: Arx5Config | None = None
) -> ArmController:
    """The controller of one arm for a `backend` value: `sim` runs `sim` with noise from `seed`,
    `arx5` drives the arm on `arx5.can_interface`. Raises ConfigError (unknown name, bad
    settings) or BackendUnavailable (SDK or bus missing), each saying what to fix."""
    opener = OPENERS.get(backend)
    if opener is None:
        raise ConfigError(f"unknown driver backend {backend!r}; choices: {list(BACKENDS)}")
    return opener(sim if sim is not None else SimConfig(), seed, arx5)
