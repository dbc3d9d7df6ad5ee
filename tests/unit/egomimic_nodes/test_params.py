"""egomimic_nodes.params: a config dataclass becomes read-only parameters with help and ranges."""

from __future__ import annotations

import dataclasses

import pytest
import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

from egomimic_hw.errors import ConfigError
from egomimic_nodes.params import declare_config, field_meta


@dataclasses.dataclass(frozen=True)
class Example:
    rate_hz: float = dataclasses.field(default=30.0, metadata=field_meta("tick rate, Hz", (1.0, 1000.0)))
    depth: int = dataclasses.field(default=5, metadata=field_meta("queue depth", (1, 100)))
    name: str = dataclasses.field(default="x", metadata=field_meta("a name"))
    box: tuple[float, ...] = (0.0, 1.0)

    def __post_init__(self):
        if self.name == "bad":
            raise ConfigError("name: 'bad' is refused by the dataclass")


@pytest.fixture
def make_node(tmp_path):
    """A node whose parameter overrides come from a params file, as a node's do (rcl parses it)."""
    ctx = rclpy.Context()
    yaml_file = tmp_path / "params.yaml"
    yaml_file.write_text("/**:\n  ros__parameters:\n    yaml_names: []\n")  # rcl gives "not set" for it
    rclpy.init(args=["--ros-args", "--params-file", str(yaml_file)], context=ctx, domain_id=0)
    nodes = []

    def make(**overrides):
        node = Node(
            f"params_test_{len(nodes)}",
            context=ctx,
            start_parameter_services=False,
            parameter_overrides=[
                v if isinstance(v, Parameter) else Parameter(k, value=v) for k, v in overrides.items()
            ],
        )
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.destroy_node()
    rclpy.shutdown(context=ctx)


def test_defaults_help_range_and_read_only(make_node):
    node = make_node()
    cfg = declare_config(node, Example)
    assert cfg == Example()
    desc = node.describe_parameter("rate_hz")
    assert desc.description == "tick rate, Hz" and desc.read_only
    assert (desc.floating_point_range[0].from_value, desc.floating_point_range[0].to_value) == (1.0, 1000.0)
    depth = node.describe_parameter("depth")
    assert (depth.integer_range[0].from_value, depth.integer_range[0].to_value) == (1, 100)
    assert node.describe_parameter("box").description == "Example.box", "no help: the field's name"
    result = node.set_parameters([Parameter("rate_hz", value=50.0)])[0]
    assert not result.successful and "read-only" in result.reason


def test_an_integer_is_taken_where_a_float_is_declared(make_node):
    cfg = declare_config(make_node(rate_hz=100), Example)
    assert cfg.rate_hz == 100.0 and isinstance(cfg.rate_hz, float)


def test_out_of_range_values_are_refused_naming_the_parameter(make_node):
    with pytest.raises(ConfigError, match=r"parameter rate_hz: .*out of range"):
        declare_config(make_node(rate_hz=5000.0), Example)
    with pytest.raises(ConfigError, match=r"parameter rate_hz: 0.0 is outside \[1.0, 1000.0\]"):
        declare_config(make_node(rate_hz=0), Example)  # an integer for a float: checked after conversion
    with pytest.raises(ConfigError, match=r"parameter depth: .*out of range"):
        declare_config(make_node(depth=0), Example)
    with pytest.raises(ConfigError, match=r"parameter depth"):
        declare_config(make_node(depth="five"), Example)


def test_the_dataclass_validation_runs_and_prefix_and_fixed_fields_apply(make_node):
    with pytest.raises(ConfigError, match="refused by the dataclass"):
        declare_config(make_node(name="bad"), Example)
    node = make_node(**{"sub.depth": 7})
    cfg = declare_config(node, Example, prefix="sub.", name="fixed")
    assert (cfg.depth, cfg.name) == (7, "fixed")
    assert not node.has_parameter("sub.name"), "a fixed field is not declared"


def test_a_range_must_be_ordered():
    with pytest.raises(ValueError):
        field_meta("x", (2.0, 1.0))


@dataclasses.dataclass(frozen=True)
class Kinds:
    names: tuple[str, ...] = dataclasses.field(default=("a", "b"), metadata=field_meta("a list of names"))
    offset_m: float | None = dataclasses.field(default=None, metadata=field_meta("unset: the calibration's"))
    fault: str = dataclasses.field(default="", metadata={"help": "settable while running", "runtime": True})
    serial: str = dataclasses.field(default="", metadata={"help": "digits read as a number", "any_type": True})


def test_string_arrays_optional_floats_runtime_and_any_type_fields(make_node):
    node = make_node()
    cfg = declare_config(node, Kinds)
    assert cfg == Kinds(), "defaults: the names as a tuple, the optional float unset (None)"
    assert node.describe_parameter("names").read_only and node.describe_parameter("offset_m").read_only
    assert node.set_parameters([Parameter("fault", value="stall:front_1")])[0].successful, "a runtime field is writable"
    assert declare_config(make_node(), Kinds, prefix="yaml_").names == (), "an empty YAML list is an empty tuple"
    cfg = declare_config(make_node(names=["c"], offset_m=0.25, serial=123456), Kinds)
    assert cfg.names == ("c",) and cfg.offset_m == 0.25 and cfg.serial == "123456"
    with pytest.raises(ConfigError, match="parameter names"):
        declare_config(make_node(names=[1.0, 2.0]), Kinds)
    with pytest.raises(ConfigError, match="parameter offset_m"):
        declare_config(make_node(offset_m="wide"), Kinds)
