"""bag:=true in the graph (first to start, last to stop, not required, bag_dir absolute) and the
egomimic-bag CLI's parts that need no DDS: --help, info, repair, argument errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from egomimic_bringup.graph import LaunchArgumentError, build_graph
from egomimic_data.bags import BagTopic, BagWriter, InterfaceDefinitions
from egomimic_launch import bag_cli


def test_bag_node_starts_first_and_is_not_required(tmp_path):
    graph = build_graph({"bag": "true", "bag_dir": "rel/bags", "bag_images": "true", "record": "true"})
    first = graph.nodes[0]
    assert first.name == "bag" and first.module == "egomimic_nodes.bag_node" and not first.required
    assert first.parameters == {"bag_dir": str(Path("rel/bags").resolve()), "images": True}
    stop = [n.name for n in graph.stop_order()]
    assert stop[0] == "recorder" and stop[-1] == "bag", "teardown: the recorder first, the bag last"
    assert all(n.name != "bag" for n in build_graph({}).nodes), "off by default"
    with pytest.raises(LaunchArgumentError):
        build_graph({"bag": "true", "bag_dir": " "})


def test_help_names_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exc:
        bag_cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(word in out for word in ("info", "play", "repair", "/clock", "ros2 bag"))
    with pytest.raises(SystemExit):
        bag_cli.main(["play", "--help"])
    out = capsys.readouterr().out
    assert all(opt in out for opt in ("--rate", "--start-offset", "--topics", "--remap", "--loop", "--clock-hz"))


def test_info_and_repair(tmp_path, capsys):
    writer = BagWriter(tmp_path / "bag", [BagTopic("/eva/x", "std_msgs/msg/String")], InterfaceDefinitions())
    writer.submit(0, 1_000_000_000, b"\x00\x01\x00\x00\x02\x00\x00\x00a\x00")
    writer.close()
    assert bag_cli.main(["info", str(tmp_path / "bag")]) == 0
    assert "Topic: /eva/x | Type: std_msgs/msg/String | Count: 1" in capsys.readouterr().out
    assert bag_cli.main(["repair", str(tmp_path / "bag")]) == 0
    assert "nothing to repair" in capsys.readouterr().out
    broken = tmp_path / "broken"
    shutil.copytree(tmp_path / "bag", broken)
    (broken / "metadata.yaml").unlink()
    assert bag_cli.main(["info", str(broken)]) == bag_cli.EXIT_ERROR
    assert "egomimic-bag repair" in capsys.readouterr().err


def test_remap_needs_from_and_to():
    assert bag_cli._parse_remaps(["/a:=/b"]) == {"/a": "/b"}
    with pytest.raises(Exception, match="FROM:=TO"):
        bag_cli._parse_remaps(["/a"])
