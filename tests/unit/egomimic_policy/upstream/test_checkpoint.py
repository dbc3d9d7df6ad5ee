"""Reading upstream checkpoints without executing them: OmegaConf config trees become plain data,
interpolations resolve, and anything off the allow list is refused by name."""

from __future__ import annotations

import os
import pickle
import sys
import types
import typing

import pytest
import torch

from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.upstream.checkpoint import load_upstream
from egomimic_policy.upstream.targets import UPSTREAM_TARGETS, instantiate, resolve


class _Container:
    """Pickles like OmegaConf's containers: NEWOBJ of the class, then its __dict__ as state."""

    def __init__(self, content, parent=None):
        self._metadata = _Meta()
        self._parent = parent
        self._content = content

    def __getstate__(self):
        return dict(self.__dict__)


class _Meta:
    def __init__(self):
        self.ref_type = typing.Any
        self.object_type = dict


class _Node:
    def __init__(self, value, parent=None):
        self._metadata = _Meta()
        self._parent = parent
        self._val = value


@pytest.fixture
def omegaconf_classes(monkeypatch):
    """Register stand-ins under OmegaConf's module and class names, so that pickle writes the
    same globals an upstream checkpoint holds (omegaconf itself is not installed here)."""
    made = {}
    monkeypatch.setitem(sys.modules, "omegaconf", sys.modules.get("omegaconf") or types.ModuleType("omegaconf"))
    for module, name, base in (
        ("omegaconf.dictconfig", "DictConfig", _Container),
        ("omegaconf.listconfig", "ListConfig", _Container),
        ("omegaconf.nodes", "AnyNode", _Node),
        ("omegaconf.base", "ContainerMetadata", _Meta),
        ("omegaconf.base", "Metadata", _Meta),
    ):
        mod = sys.modules.get(module) or types.ModuleType(module)
        cls = type(name, (base,), {"__module__": module, "__qualname__": name})
        setattr(mod, name, cls)
        monkeypatch.setitem(sys.modules, module, mod)
        made[name] = cls
    return made


def config_tree(classes, tree, parent=None):
    """Plain data -> the stand-in OmegaConf objects (each child knows its parent, as OmegaConf's)."""
    if isinstance(tree, dict):
        node = classes["DictConfig"]({}, parent)
        node._content = {k: config_tree(classes, v, node) for k, v in tree.items()}
    elif isinstance(tree, list):
        node = classes["ListConfig"]([], parent)
        node._content = [config_tree(classes, v, node) for v in tree]
    else:
        node = classes["AnyNode"](tree, parent)
        node._metadata = classes["Metadata"]()
        return node
    node._metadata = classes["ContainerMetadata"]()
    return node


def save(tmp_path, obj, name="upstream.ckpt"):
    path = tmp_path / name
    torch.save(obj, path)
    return path


def test_config_tree_becomes_plain_data_with_interpolations_resolved(tmp_path, omegaconf_classes):
    tree = {
        "model": {
            "horizon": 100,
            "stages": [
                {"action_horizon": "${model.horizon}", "name": "h=${model.horizon}"},
                {"up": "${...horizon}", "same": "${.up}"},
            ],
        }
    }
    ckpt = {
        "state_dict": {"nets.policy.w": torch.ones(2)},
        "hyper_parameters": {"config_tree": config_tree(omegaconf_classes, tree)},
    }
    out = load_upstream(save(tmp_path, ckpt))
    stages = out["hyper_parameters"]["config_tree"]["model"]["stages"]
    assert stages[0] == {"action_horizon": 100, "name": "h=100"}
    assert stages[1] == {"up": 100, "same": 100}  # OmegaConf's relative form: one dot = this node
    assert type(out["hyper_parameters"]["config_tree"]) is dict
    assert torch.equal(out["state_dict"]["nets.policy.w"], torch.ones(2))


def test_a_global_off_the_allow_list_is_refused_by_name(tmp_path):
    path = save(tmp_path, {"state_dict": {}, "payload": os.path.join})  # a function: pickled as a global
    with pytest.raises(CheckpointError, match="refused to unpickle global"):
        load_upstream(path)


def test_code_execution_through_reduce_is_refused(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    path = tmp_path / "evil.ckpt"
    with open(path, "wb") as f:
        pickle.dump({"state_dict": {}, "x": Exploit()}, f)
    with pytest.raises(CheckpointError, match=r"refused to unpickle global (posix|os)\.system"):
        load_upstream(path)


def test_interpolation_with_a_resolver_is_refused(tmp_path, omegaconf_classes):
    tree = {"model": {"home": "${oc.env:HOME}"}}
    path = save(tmp_path, {"hyper_parameters": {"config_tree": config_tree(omegaconf_classes, tree)}})
    with pytest.raises(CheckpointError, match="resolver"):
        load_upstream(path)


def test_unknown_upstream_target_is_refused_by_name():
    with pytest.raises(CheckpointError, match="egomimic.models.Mystery"):
        instantiate({"_target_": "egomimic.models.Mystery", "x": 1}, "config_tree.model")


PINNED_TARGETS = (
    "egomimic.pl_utils.pl_model.ModelWrapper",
    "egomimic.pipeline.algo.PipelineAlgo",
    "egomimic.pipeline.stages_sampler.FusedObsEncoder",
    "egomimic.pipeline.stages_sampler.SharedAdapterObsEncoder",
    "egomimic.models.stems.input_modules.ObsToken",
    "egomimic.models.stems.cond_encoders.CondEncoderModule",
    "egomimic.models.stems.cond_encoders.MultiEmbodimentCondEncoder",
    "egomimic.models.stems.visual_core.VisualCore",
    "egomimic.pipeline.stages_sampler.GaussianLatentNoise",
    "egomimic.pipeline.stages_sampler.MultiJActionSampler",
    "egomimic.pipeline.stages_sampler_moe.MoEMultiJActionSampler",
    "egomimic.models.denoising_nets.CrossTransformer",
    "egomimic.models.moe_denoising_nets.MoECrossTransformer",
    "egomimic.pipeline.stages_sampler.NativeActionMSELoss",
)


def test_target_table_is_append_only_and_every_entry_resolves():
    """A checkpoint that loaded once keeps loading: no pinned entry may disappear."""
    assert [t for t in PINNED_TARGETS if t not in UPSTREAM_TARGETS] == []
    for target in UPSTREAM_TARGETS:
        assert isinstance(resolve(target), type), target
