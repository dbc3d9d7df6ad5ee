"""egomimic_hw.config_fields: a field's metadata range is checked for every config."""

from dataclasses import dataclass, field

import pytest

from egomimic_hw.config_fields import check_ranges
from egomimic_hw.errors import ConfigError


@dataclass(frozen=True)
class Example:
    rate_hz: float = field(default=30.0, metadata={"help": "Hz", "range": (1.0, 100.0)})
    name: str = field(default="x", metadata={"help": "no range"})

    def __post_init__(self):
        check_ranges(self)


def test_values_inside_and_on_the_bounds_pass():
    assert Example(rate_hz=1.0).rate_hz == 1.0 and Example(rate_hz=100.0).rate_hz == 100.0


@pytest.mark.parametrize("value", [0.5, 100.5, float("nan")])
def test_values_outside_are_refused_naming_the_field(value):
    with pytest.raises(ConfigError, match=r"rate_hz must be in \[1.0, 100.0\]"):
        Example(rate_hz=value)
