"""The courses' models: linear regression, softmax, MLP, a two-conv CNN, and ResNet-18/50 (no torchvision). Each is
a function a config can name as `model._target_`; `task.model=cnn` is the built-in tasks' shortcut."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn


# The built-in models, each taking what sweepit fills in (input_shape without the batch dimension:
# (features,) or (channels, height, width); n_outputs: classes, or 1 for regression) and its own knobs.
def linear(input_shape: Sequence[int], n_outputs: int) -> nn.Module:
    """y = W x + b: linear regression (the courses' first exercise)."""
    return nn.Linear(int(input_shape[-1]), n_outputs)


def softmax(input_shape: Sequence[int], n_outputs: int) -> nn.Module:
    """A single dense layer; the softmax lives in the cross-entropy loss."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), n_outputs))


def mlp(input_shape: Sequence[int], n_outputs: int, hidden: int = 128, dropout: float = 0.0) -> nn.Module:
    """One hidden ReLU layer of `hidden` units, dropout before the classifier."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), int(hidden)), nn.ReLU(),
                         nn.Dropout(float(dropout)), nn.Linear(int(hidden), n_outputs))


def cnn(input_shape: Sequence[int], n_outputs: int, hidden: int = 128, dropout: float = 0.0) -> nn.Module:
    """Two 3x3 conv blocks with max-pooling, then a dense layer (ConvNet)."""
    return ConvNet(int(input_shape[0]), (int(input_shape[1]), int(input_shape[2])), n_outputs, int(hidden),
                   float(dropout))


def resnet18(n_outputs: int, image_size: int = 32) -> nn.Module:
    """ResNet-18; images of 64 px or less get the CIFAR stem (3x3 conv, no max-pool)."""
    return ResNet("resnet18", n_outputs, small_input=int(image_size) <= 64)


def resnet50(n_outputs: int, image_size: int = 32) -> nn.Module:
    """ResNet-50; images of 64 px or less get the CIFAR stem (3x3 conv, no max-pool)."""
    return ResNet("resnet50", n_outputs, small_input=int(image_size) <= 64)


def build_model(name: str, input_shape: Sequence[int], n_outputs: int, *, hidden: int = 128,
                dropout: float = 0.0, image_size: int = 32) -> nn.Module:
    """A built-in model by name (what `task.model` names), built as the training loop builds it."""
    from sweepit._targets import instantiate
    from sweepit.train._build import BUILTIN_MODELS, builtin_node

    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown model {name!r}")
    node = builtin_node(name, {"hidden": hidden, "dropout": dropout, "image_size": image_size})
    model: nn.Module = instantiate(node, "model", fill={"input_shape": tuple(input_shape), "n_outputs": n_outputs})
    return model


class ConvNet(nn.Module):
    """Two 3x3 conv layers, each followed by batch norm, ReLU and 2x2 max-pooling, then two dense layers."""

    def __init__(self, channels: int, hw: tuple[int, int], n_classes: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        )
        flat = 64 * (hw[0] // 4) * (hw[1] // 4)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(flat, hidden), nn.ReLU(),
            nn.Dropout(dropout), nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class Block(nn.Module):
    """A residual block: two 3x3 convs (ResNet-18's), or with `bottleneck` a 1x1-3x3-1x1 one of 4x the width out
    (ResNet-50's); a 1x1 conv shortcut where the shape changes."""

    def __init__(self, c_in: int, c: int, stride: int, bottleneck: bool) -> None:
        super().__init__()
        self.c_out = c_out = c * 4 if bottleneck else c
        if bottleneck:
            layers = [nn.Conv2d(c_in, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                      nn.Conv2d(c, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                      nn.Conv2d(c, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
        else:
            layers = [nn.Conv2d(c_in, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                      nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)]
        self.body = nn.Sequential(*layers)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet-18/50 (He et al., 2016). `small_input`: 3x3 stem without max-pool, as for 32x32 CIFAR images."""

    LAYOUT: ClassVar[dict[str, tuple[bool, tuple[int, ...]]]] = {  # bottleneck blocks?, blocks per stage
        "resnet18": (False, (2, 2, 2, 2)),
        "resnet50": (True, (3, 4, 6, 3)),
    }

    def __init__(self, name: str, n_classes: int, small_input: bool) -> None:
        super().__init__()
        bottleneck, counts = self.LAYOUT[name]
        if small_input:
            stem: list[nn.Module] = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True)]
        else:
            stem = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                    nn.MaxPool2d(3, 2, 1)]
        layers: list[nn.Module] = []
        c_in = 64
        for i, n in enumerate(counts):
            c = 64 * 2**i
            for j in range(n):
                block = Block(c_in, c, 2 if (j == 0 and i > 0) else 1, bottleneck)
                layers.append(block)
                c_in = block.c_out
        self.net = nn.Sequential(*stem, *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
