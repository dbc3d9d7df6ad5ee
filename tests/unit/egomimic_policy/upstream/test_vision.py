"""Upstream's image encoder: the ResNet-18 trunk carries torchvision's names and shapes, the
spatial softmax upstream's grids and keypoint order, and VisualCore upstream's crop and layout."""

from __future__ import annotations

import pytest
import torch

from egomimic_policy.upstream.vision import ResNet18Trunk, SpatialSoftmax, VisualCore, trunk_output_size

torch.set_num_threads(1)

BN_ENTRIES = (("weight", "c"), ("bias", "c"), ("running_mean", "c"), ("running_var", "c"), ("num_batches_tracked", ""))


def torchvision_resnet18_entries() -> dict[str, tuple[int, ...]]:
    """torchvision's resnet18 state_dict without `fc`, written from the published architecture:
    conv1 7x7/2 (3 -> 64), bn1, then layer1..4 of two BasicBlocks (conv1 3x3, bn1, conv2 3x3,
    bn2; the first block of layer2..4 strides 2 and has downsample.0 (1x1 conv) and .1 (bn))."""
    entries: dict[str, tuple[int, ...]] = {}

    def bn(prefix: str, channels: int) -> None:
        for name, kind in BN_ENTRIES:
            entries[f"{prefix}.{name}"] = (channels,) if kind else ()

    entries["conv1.weight"] = (64, 3, 7, 7)
    bn("bn1", 64)
    in_planes = 64
    for layer, planes in enumerate((64, 128, 256, 512), start=1):
        for block in (0, 1):
            prefix = f"layer{layer}.{block}"
            block_in = in_planes if block == 0 else planes
            entries[f"{prefix}.conv1.weight"] = (planes, block_in, 3, 3)
            bn(f"{prefix}.bn1", planes)
            entries[f"{prefix}.conv2.weight"] = (planes, planes, 3, 3)
            bn(f"{prefix}.bn2", planes)
            if block == 0 and layer > 1:
                entries[f"{prefix}.downsample.0.weight"] = (planes, in_planes, 1, 1)
                bn(f"{prefix}.downsample.1", planes)
        in_planes = planes
    return entries


def shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in module.state_dict().items()}


def test_trunk_state_dict_is_torchvision_resnet18_without_fc():
    trunk = ResNet18Trunk()
    expected = torchvision_resnet18_entries()
    # 20 convolutions + 20 batch norms (5 entries each) = 120 entries: 60 parameter tensors (torchvision's
    # 62 with fc.weight and fc.bias) and 60 batch-norm buffers (running_mean, running_var, num_batches_tracked)
    assert len(expected) == 120
    assert list(shapes(trunk)) == list(expected)  # same names in the same order
    assert shapes(trunk) == expected
    # torchvision's published count: 11,689,512 parameters, of which fc holds 512 * 1000 + 1000
    assert sum(p.numel() for p in trunk.parameters()) == 11_689_512 - 513_000
    assert [name for name, _ in trunk.named_children()] == [
        "conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4"
    ]  # fmt: skip


def test_visual_core_backbone_is_the_trunk_without_its_last_two_children():
    core = VisualCore(image_size=64, num_kp=8, feature_dimension=16)
    index = {"conv1": "0", "bn1": "1", "layer1": "4", "layer2": "5", "layer3": "6", "layer4": "7"}
    expected = {}
    for name, shape in torchvision_resnet18_entries().items():
        head, _, rest = name.partition(".")
        expected[f"backbone.{index[head]}.{rest}"] = shape
    expected |= {
        "pool.temperature": (1,),
        "pool.pos_x": (1, 4),
        "pool.pos_y": (1, 4),
        "pool.nets.weight": (8, 512, 1, 1),
        "pool.nets.bias": (8,),
        "head.weight": (16, 16),
        "head.bias": (16,),
    }
    assert shapes(core) == expected
    assert "pool.temperature" not in dict(core.named_parameters())  # a constant buffer, as upstream


@pytest.mark.parametrize("size", [(64, 64), (120, 160), (37, 50)])
def test_trunk_output_size_matches_a_forward(size):
    trunk = ResNet18Trunk().eval()
    with torch.no_grad():
        out = trunk(torch.zeros(1, 3, *size))
    assert tuple(out.shape) == (1, 512, *trunk_output_size(*size))


def test_spatial_softmax_grids_and_keypoint_order():
    pool = SpatialSoftmax(in_channels=2, in_h=2, in_w=3, num_kp=None)
    # meshgrid(linspace(-1, 1, W), linspace(-1, 1, H)) flattened row-major
    assert torch.equal(pool.pos_x, torch.tensor([[-1.0, 0.0, 1.0, -1.0, 0.0, 1.0]]))
    assert torch.equal(pool.pos_y, torch.tensor([[-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]]))
    feature = torch.full((1, 2, 2, 3), -1e4)
    feature[0, 0, 1, 2] = 0.0  # keypoint 0 at the bottom-right cell
    feature[0, 1, 0, 1] = 0.0  # keypoint 1 at the top-middle cell
    out = pool(feature)
    assert out.shape == (1, 2, 2)
    assert torch.allclose(out, torch.tensor([[[1.0, 1.0], [0.0, -1.0]]]))  # (x, y) per keypoint
    # softmax(logits / temperature) weighting the grids
    logits = torch.randn(1, 2, 2, 3)
    attention = torch.softmax(logits.reshape(2, 6) / 0.5, dim=-1)
    pool.temperature.fill_(0.5)
    expected = torch.stack([(attention * pool.pos_x).sum(1), (attention * pool.pos_y).sum(1)], dim=-1)
    assert torch.allclose(pool(logits), expected.view(1, 2, 2), atol=1e-6)


def test_spatial_softmax_refuses_a_feature_map_of_another_size():
    pool = SpatialSoftmax(in_channels=4, in_h=2, in_w=2, num_kp=3)
    with pytest.raises(ValueError, match="2x2"):
        pool(torch.zeros(1, 4, 3, 3))


def test_pretrained_init_is_skipped_not_downloaded():
    """Upstream's pretrained=True only chose an ImageNet initialization; a checkpoint replaces
    every backbone tensor, so the same architecture is built and nothing is fetched."""
    a, b = VisualCore(pretrained=True), VisualCore(pretrained=False)
    assert a.pretrained_init_skipped and not b.pretrained_init_skipped
    assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(crop_aug=True, crop_height=64),
        dict(crop_aug=True, crop_height=128, crop_width=128, image_size=96),
        dict(crop_eval_mode="middle"),
        dict(crop_sample_mode="exclusive"),
        dict(resnet_model="resnet50"),
    ],
)
def test_bad_visual_core_configs_are_refused(kwargs):
    with pytest.raises(ValueError):
        VisualCore(**kwargs)


def make_core(**kwargs) -> VisualCore:
    torch.manual_seed(0)
    config = dict(
        in_channels=3,
        image_size=480,
        num_kp=8,
        feature_dimension=16,
        pretrained=False,
        crop_aug=True,
        crop_height=64,
        crop_width=64,
        crop_eval_mode="center",
        crop_sample_mode="v02",
    )
    return VisualCore(**(config | kwargs))


def test_eval_crop_is_the_centre_crop_and_images_are_not_resized():
    core = make_core().eval()
    seen = []
    core.backbone.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
    images = torch.rand(2, 2, 3, 120, 160)  # (B, T, C, H, W); image_size 480 is not the image's size
    assert core.crop_offsets(120, 160) == ((120 - 64) // 2, (160 - 64) // 2) == (28, 48)
    with torch.no_grad():
        out = core(images)
        again = core(images)
    assert out.shape == (2, 2, 16)
    assert torch.equal(out, again)
    assert torch.equal(seen[0], images.reshape(4, 3, 120, 160)[:, :, 28:92, 48:112])
    # the layout: backbone -> spatial softmax -> flatten (x0, y0, x1, ...) -> head, per image
    with torch.no_grad():
        manual = core.head(core.pool(core.backbone(seen[0])).flatten(1)).reshape(2, 2, 16)
    assert torch.equal(out, manual)


def test_training_crop_is_random_and_within_the_image():
    core = make_core(crop_height=4, crop_width=5).train()
    image = torch.arange(10 * 12, dtype=torch.float32).reshape(1, 1, 10, 12).repeat(64, 3, 1, 1)
    torch.manual_seed(1)
    crops = core._crop(image)
    assert crops.shape == (64, 3, 4, 5)
    corners = crops[:, 0, 0, 0].long()
    rows, cols = corners // 12, corners % 12
    # "v02": corner = floor(rand * (H - h)), so the last position H - h is never drawn
    assert 0 <= rows.min() and rows.max() < 10 - 4 and 0 <= cols.min() and cols.max() < 12 - 5
    assert len(set(corners.tolist())) > 1
    for crop, row, col in zip(crops, rows, cols):
        assert torch.equal(crop, image[0, :, row : row + 4, col : col + 5])
    assert torch.equal(core.eval()._crop(image[:1]), image[:1, :, 3:7, 3:8])


def test_random_eval_crop_mode_and_too_small_images():
    core = make_core(crop_eval_mode="random").eval()
    torch.manual_seed(2)
    crops = core._crop(torch.rand(8, 3, 120, 160))
    assert crops.shape == (8, 3, 64, 64)
    with pytest.raises(ValueError, match="smaller"):
        make_core().eval()._crop(torch.rand(1, 3, 60, 160))
