"""Upstream EgoVerse's image encoder, rebuilt with upstream's module and parameter names.

Reproduces `egomimic/models/stems/visual_core.py` of GaTech-RL2/EgoVerse (`SpatialSoftmax`,
`VisualCore`; a port of robomimic's ResNet18Conv + spatial-softmax core) so that the lab's
checkpoints load with `load_state_dict(strict=True)` and give upstream's outputs. Upstream takes
its trunk from torchvision (`resnet18` without its last two children, avgpool and fc); torchvision
is not a dependency here, so `ResNet18Trunk` rebuilds that network with torchvision's names:
`VisualCore.backbone` is `nn.Sequential(conv1, bn1, relu, maxpool, layer1, ..., layer4)`, whose
state_dict keys are `backbone.0.weight` (conv1), `backbone.1.*` (bn1), `backbone.4.0.conv1.weight`
(layer1's first block), ..., `backbone.7.1.bn2.*`, exactly as in upstream's checkpoints.

Pretrained (ImageNet) weights are never fetched: every backbone tensor comes from the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

NormFactory = Callable[[int], nn.Module]

RESNET18_WIDTHS = (64, 128, 256, 512)
"""Output channels of layer1..layer4 (two BasicBlocks each; layer2..4 halve the resolution)."""


def _batch_norm(channels: int) -> nn.Module:
    return nn.BatchNorm2d(channels)


def _group_norm(channels: int) -> nn.Module:
    # upstream's norm_layer="group": GroupNorm(C // 16, C) in place of every BatchNorm2d
    return nn.GroupNorm(max(1, channels // 16), channels)


NORM_LAYERS: dict[str, NormFactory] = {"batch": _batch_norm, "group": _group_norm}


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: two 3x3 convolutions and a residual (1x1 conv + norm
    `downsample` when the shape changes), ReLU after the sum."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1, norm: NormFactory = _batch_norm) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = norm(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = norm(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False), norm(planes)
            )
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + shortcut)


class ResNet18Trunk(nn.Module):
    """torchvision's `resnet18` up to layer4 (no avgpool, no fc), same child names and order:
    conv1, bn1, relu, maxpool, layer1..layer4. Input (N, C, H, W) -> (N, 512, H/32, W/32)."""

    def __init__(self, in_channels: int = 3, norm_layer: str = "batch") -> None:
        super().__init__()
        if norm_layer not in NORM_LAYERS:
            raise ValueError(f"norm_layer must be one of {sorted(NORM_LAYERS)}, got {norm_layer!r}")
        norm = NORM_LAYERS[norm_layer]
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = norm(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        in_planes = 64
        for index, planes in enumerate(RESNET18_WIDTHS):
            stride = 1 if index == 0 else 2
            blocks = [BasicBlock(in_planes, planes, stride, norm), BasicBlock(planes, planes, 1, norm)]
            self.add_module(f"layer{index + 1}", nn.Sequential(*blocks))
            in_planes = planes
        # torchvision's initialisation (irrelevant once a checkpoint is loaded, kept for fidelity)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d | nn.GroupNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for child in self.children():
            x = child(x)
        return x


def trunk_output_size(height: int, width: int) -> tuple[int, int]:
    """Spatial size of `ResNet18Trunk`'s output for an input of `height` x `width` (the
    arithmetic of its strided conv1, maxpool and layer2..4; same as running a dummy image)."""

    def down(n: int, kernel: int, stride: int, padding: int) -> int:
        return (n + 2 * padding - kernel) // stride + 1

    sizes = []
    for n in (height, width):
        n = down(n, 7, 2, 3)  # conv1
        n = down(n, 3, 2, 1)  # maxpool
        for _ in range(3):  # first conv of layer2, layer3, layer4
            n = down(n, 3, 2, 1)
        if n < 1:
            raise ValueError(f"an image of {height}x{width} is too small for the ResNet-18 trunk")
        sizes.append(n)
    return sizes[0], sizes[1]


class SpatialSoftmax(nn.Module):
    """Spatial-softmax keypoints (robomimic's, as upstream ports it).

    An optional 1x1 conv (`nets`, C -> num_kp) maps the (N, C, H, W) feature map to num_kp
    channels; each channel's softmax over its H*W cells (logits divided by the constant
    `temperature` buffer) weights the grids `pos_x`, `pos_y` (buffers (1, H*W), row-major from
    `meshgrid(linspace(-1, 1, W), linspace(-1, 1, H))`). Output (N, num_kp, 2): per keypoint
    its expected (x, y), so flattening gives x0, y0, x1, y1, ...
    """

    def __init__(self, in_channels: int, in_h: int, in_w: int, num_kp: int | None = 32, temperature: float = 1.0):
        super().__init__()
        self._in_c = int(in_channels)
        self._in_h = int(in_h)
        self._in_w = int(in_w)
        self.nets: nn.Conv2d | None = None
        if num_kp is None:
            self._num_kp = self._in_c
        else:
            self._num_kp = int(num_kp)
            self.nets = nn.Conv2d(self._in_c, self._num_kp, kernel_size=1)
        self.temperature: torch.Tensor
        self.pos_x: torch.Tensor
        self.pos_y: torch.Tensor
        self.register_buffer("temperature", torch.full((1,), float(temperature)))
        # the grids are built in float64 by numpy and stored as float32, as upstream does
        grid_x, grid_y = np.meshgrid(np.linspace(-1.0, 1.0, self._in_w), np.linspace(-1.0, 1.0, self._in_h))
        cells = self._in_h * self._in_w
        self.register_buffer("pos_x", torch.from_numpy(grid_x.reshape(1, cells)).float())
        self.register_buffer("pos_y", torch.from_numpy(grid_y.reshape(1, cells)).float())

    @property
    def num_kp(self) -> int:
        return self._num_kp

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        if self.nets is not None:
            feature = self.nets(feature)
        if tuple(feature.shape[-2:]) != (self._in_h, self._in_w):
            raise ValueError(
                f"SpatialSoftmax was built for a {self._in_h}x{self._in_w} feature map, got {tuple(feature.shape)}"
            )
        logits = feature.reshape(-1, self._in_h * self._in_w)  # (N * num_kp, H * W)
        attention = torch.softmax(logits / self.temperature, dim=-1)
        x = (self.pos_x * attention).sum(dim=1, keepdim=True)
        y = (self.pos_y * attention).sum(dim=1, keepdim=True)
        return torch.cat([x, y], dim=1).view(-1, self._num_kp, 2)


class VisualCore(nn.Module):
    """Upstream's per-camera image encoder: optional crop -> ResNet-18 trunk (`backbone`) ->
    `SpatialSoftmax` (`pool`) -> flatten -> Linear (`head`, 2 * num_kp -> feature_dimension).

    Input (..., C, H, W) RGB float (upstream feeds [0, 1], no normalisation), output
    (..., feature_dimension). `image_size` only sizes the keypoint grid when `crop_aug` is off
    and bounds the crop when it is on: images are NOT resized. With `crop_aug` the grid is sized
    for the crop; in eval mode with crop_eval_mode="center" the crop is the deterministic one at
    ((H - crop_height) // 2, (W - crop_width) // 2); in training mode (or crop_eval_mode="random")
    it is drawn per image, the corner in {0..H-h} ("inclusive") or floor(rand * (H-h)) ("v02").
    """

    def __init__(
        self,
        in_channels: int = 3,
        image_size: int = 96,
        num_kp: int = 32,
        feature_dimension: int = 64,
        pretrained: bool = False,
        resnet_model: str = "resnet18",
        crop_aug: bool = False,
        crop_height: int | None = None,
        crop_width: int | None = None,
        crop_eval_mode: str = "center",
        crop_sample_mode: str = "inclusive",
        norm_layer: str = "batch",
    ) -> None:
        super().__init__()
        # pretrained=True only chose upstream's initialization (ImageNet weights) before training;
        # here every backbone tensor comes from the checkpoint (strict load), so nothing is downloaded.
        self.pretrained_init_skipped = bool(pretrained)
        if resnet_model != "resnet18":
            raise ValueError(
                f"VisualCore reproduces upstream's resnet18 backbone only, got resnet_model={resnet_model!r}"
            )
        if norm_layer not in NORM_LAYERS:
            raise ValueError(f"norm_layer must be batch|group, got {norm_layer!r}")
        if crop_eval_mode not in ("center", "random"):
            raise ValueError(f"crop_eval_mode must be center|random, got {crop_eval_mode!r}")
        if crop_sample_mode not in ("inclusive", "v02"):
            raise ValueError(f"crop_sample_mode must be inclusive|v02, got {crop_sample_mode!r}")
        self.norm_layer = str(norm_layer)
        self.crop_eval_mode = str(crop_eval_mode)
        self.crop_sample_mode = str(crop_sample_mode)
        self.image_size = int(image_size)
        self.crop_aug = bool(crop_aug)
        self.crop_height: int | None = None
        self.crop_width: int | None = None
        if self.crop_aug:
            if crop_height is None or crop_width is None:
                raise ValueError("VisualCore(crop_aug=True) requires crop_height and crop_width.")
            self.crop_height, self.crop_width = int(crop_height), int(crop_width)
            if self.crop_height > self.image_size or self.crop_width > self.image_size:
                raise ValueError(
                    f"crop ({self.crop_height}x{self.crop_width}) must fit in image_size {self.image_size}."
                )
            grid_h, grid_w = trunk_output_size(self.crop_height, self.crop_width)
        else:
            grid_h, grid_w = trunk_output_size(self.image_size, self.image_size)

        trunk = ResNet18Trunk(int(in_channels), self.norm_layer)
        self.backbone = nn.Sequential(*trunk.children())
        self.pool = SpatialSoftmax(in_channels=RESNET18_WIDTHS[-1], in_h=grid_h, in_w=grid_w, num_kp=num_kp)
        self.feature_dimension = int(feature_dimension)
        self.head = nn.Linear(self.pool.num_kp * 2, self.feature_dimension)
        self.embed_dim = self.feature_dimension

    def crop_offsets(self, height: int, width: int) -> tuple[int, int]:
        """Top-left corner of the deterministic (centre) crop of a `height` x `width` image."""
        assert self.crop_height is not None and self.crop_width is not None
        if height < self.crop_height or width < self.crop_width:
            raise ValueError(f"a {height}x{width} image is smaller than the {self.crop_height}x{self.crop_width} crop")
        return (height - self.crop_height) // 2, (width - self.crop_width) // 2

    def _crop(self, x: torch.Tensor) -> torch.Tensor:
        assert self.crop_height is not None and self.crop_width is not None
        n, _, height, width = x.shape
        ch, cw = self.crop_height, self.crop_width
        top, left = self.crop_offsets(height, width)
        if not (self.training or self.crop_eval_mode == "random"):
            return x[:, :, top : top + ch, left : left + cw]
        # a random corner per image (upstream's draw order: rows, then columns)
        span_h, span_w = height - ch, width - cw
        rows0 = self._corners(n, span_h, x.device)
        cols0 = self._corners(n, span_w, x.device)
        rows = rows0[:, None] + torch.arange(ch, device=x.device)[None, :]  # (N, ch)
        cols = cols0[:, None] + torch.arange(cw, device=x.device)[None, :]  # (N, cw)
        picked = x[torch.arange(n, device=x.device)[:, None, None], :, rows[:, :, None], cols[:, None, :]]
        return picked.permute(0, 3, 1, 2).contiguous()  # (N, ch, cw, C) -> (N, C, ch, cw)

    def _corners(self, n: int, span: int, device: torch.device) -> torch.Tensor:
        if span <= 0:
            return torch.zeros(n, dtype=torch.long, device=device)
        if self.crop_sample_mode == "v02":
            return (span * torch.rand(n, device=device)).long()
        return torch.randint(0, span + 1, (n,), device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        leading = x.shape[:-3]
        x = x.reshape(-1, *x.shape[-3:])
        if self.crop_aug:
            x = self._crop(x)
        keypoints = self.pool(self.backbone(x))  # (N, num_kp, 2)
        return self.head(keypoints.flatten(1)).reshape(*leading, self.embed_dim)
