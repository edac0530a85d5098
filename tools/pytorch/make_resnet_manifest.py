#!/usr/bin/env python3
"""Writes src/nn/testdata/resnet_manifest.txt: torchvision's ResNet parameter and buffer names,
shapes and parameter counts, which src/nn/resnet_test.cpp checks tessel's nn::ResNet against.

    python tools/pytorch/make_resnet_manifest.py      # needs torch and torchvision (PyPI), CPU only

The models are torchvision.models.resnet18/34/50(num_classes=...) themselves. The CIFAR stem is
the usual change to torchvision's model for 32x32 images (the one tessel's ResNetStem::kCifar
means): conv1 = Conv2d(3, 64, 3, stride=1, padding=1, bias=False), maxpool = Identity().

Format (one block per model, names in the order named_parameters() / named_buffers() give them):

    model <name> stem=<imagenet|cifar> classes=<n>
    param <name> <dim> <dim> ...
    buffer <name> <dim> ...          (a scalar buffer has no dims)
    output <dim> <dim>               logits shape for a batch of 2 at the given input size
    input <c> <h> <w>
    parameters <total count>
    end
"""

import argparse
import os

import torch
import torch.nn as nn
import torchvision
import torchvision.models as models

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# (torchvision builder, stem, classes, input size): the shapes of shared/WORKLOADS.md (resnet18
# CIFAR, 10 classes, 3x32x32; resnet50 ImageNet, 1000 classes, 3x224x224) and the other depths.
MODELS = [
    ("resnet18", "cifar", 10, (3, 32, 32)),
    ("resnet18", "imagenet", 1000, (3, 224, 224)),
    ("resnet34", "imagenet", 1000, (3, 224, 224)),
    ("resnet50", "imagenet", 1000, (3, 224, 224)),
    ("resnet50", "cifar", 100, (3, 32, 32)),
]


def build(name, stem, classes):
    model = getattr(models, name)(weights=None, num_classes=classes)
    if stem == "cifar":
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(REPO, "src", "nn", "testdata",
                                                      "resnet_manifest.txt"))
    args = parser.parse_args()
    lines = [f"# torchvision {torchvision.__version__} (torch {torch.__version__}), written by "
             "tools/pytorch/make_resnet_manifest.py"]
    for name, stem, classes, size in MODELS:
        model = build(name, stem, classes).eval()
        lines.append(f"model {name} stem={stem} classes={classes}")
        for n, p in model.named_parameters():
            lines.append(" ".join(["param", n] + [str(d) for d in p.shape]))
        for n, b in model.named_buffers():
            lines.append(" ".join(["buffer", n] + [str(d) for d in b.shape]))
        with torch.no_grad():
            out = model(torch.zeros(2, *size))
        lines.append(" ".join(["input"] + [str(d) for d in size]))
        lines.append(" ".join(["output"] + [str(d) for d in out.shape]))
        lines.append(f"parameters {sum(p.numel() for p in model.parameters())}")
        lines.append("end")
        print(f"{name} {stem} {classes}: {sum(p.numel() for p in model.parameters())} parameters")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
