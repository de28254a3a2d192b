"""Image classification models: any torchvision classifier by name, and a tiny ResNet for tests."""
from __future__ import annotations

import importlib
import sys
import types

import torch
from torch import nn
from torch.nn import functional as F


def import_torchvision():
    """Import torchvision, also where only a CUDA build of it is installed next to a CPU torch.

    torchvision's package import registers fake kernels for its compiled detection operators
    (nms, roi_align), which fails when its C++ library cannot load (it links CUDA libraries);
    the classification models never use those operators, so on that failure we re-import
    with the two registration modules replaced by empty ones and keep the models.
    """
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
        sys.modules[name] = types.ModuleType(name)
    return importlib.import_module("torchvision")


def classification_models() -> list[str]:
    """Names accepted by `model=<name>`: torchvision's classification models."""
    tv = import_torchvision()
    return sorted(tv.models.list_models(module=tv.models))


def build(cfg) -> nn.Module:
    if cfg.family == "tiny-resnet":
        return TinyResNet(cfg.num_classes, cfg.width)
    tv = import_torchvision()
    names = tv.models.list_models(module=tv.models)
    if cfg.arch not in names:
        raise ValueError(
            f"unknown torchvision model {cfg.arch!r}; accepted: {', '.join(sorted(names))}"
        )
    return tv.models.get_model(cfg.arch, weights=None, num_classes=cfg.num_classes)


def loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.skip is None else self.skip(x)))


class TinyResNet(nn.Module):
    """Stem + three residual stages + linear head: 29 parameter tensors, 78 k parameters."""

    def __init__(self, num_classes: int = 10, width: int = 16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = _Block(width, width, 1)
        self.layer2 = _Block(width, 2 * width, 2)
        self.layer3 = _Block(2 * width, 4 * width, 2)
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
