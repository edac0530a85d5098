#!/usr/bin/env python3
"""PyTorch's side of `tessel bench train`: one workload of shared/WORKLOADS.md, trained in eager
mode on the CPU, printed as one JSON line.

    python bench_train.py --workload mlp --steps 20 --warmup 3 --threads 2

A step is what src/train/workloads.cpp does in tessel: forward, cross-entropy, backward, AdamW
(lr 1e-3, PyTorch's defaults otherwise), on one batch made once and kept in memory, f32 (or,
with --precision bf16, forward and loss under torch.autocast with bfloat16, f32 weights).
The models are the ones WORKLOADS.md names, written as their usual PyTorch code (nanoGPT for the
GPTs, torchvision's block layout for the ResNets). `tessel bench train` runs this script in a
process of its own, so the peak RSS printed is this process's alone.

--check prints each model's parameter count instead of timing (no torch threads needed).
"""
import argparse
import json
import math
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# --- models ---------------------------------------------------------------------------------

def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                         nn.ReLU(), nn.Linear(256, 10))


class SmallCnn(nn.Module):  # src/nn/cnn.h
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class CausalSelfAttention(nn.Module):  # nanoGPT
    def __init__(self, c, h):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.n_head = h

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, h)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * c, c))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied head


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or cin != out:
            self.downsample = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):  # torchvision's layout; cifar_stem: conv3x3 64, no max-pool
    def __init__(self, block, counts, classes, cifar_stem):
        super().__init__()
        if cifar_stem:
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for i, n in enumerate(counts):
            planes = 64 << i
            blocks = []
            for j in range(n):
                blocks.append(block(cin, planes, 2 if (j == 0 and i > 0) else 1))
                cin = planes * block.expansion
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# name: (model factory, input shape, classes or vocabulary, unit)
WORKLOADS = {
    "mlp": (mlp, (128, 1, 28, 28), 10, "samples/s"),
    "cnn": (SmallCnn, (128, 1, 28, 28), 10, "samples/s"),
    "gpt_tiny": (lambda: GPT(65, 64, 4, 4, 128), (12, 64), 65, "tokens/s"),
    "gpt_mini": (lambda: GPT(65, 256, 6, 6, 384), (8, 256), 65, "tokens/s"),
    "resnet18": (lambda: ResNet(BasicBlock, [2, 2, 2, 2], 10, True), (32, 3, 32, 32), 10,
                 "samples/s"),
    "resnet50": (lambda: ResNet(Bottleneck, [3, 4, 6, 3], 1000, False), (8, 3, 224, 224), 1000,
                 "samples/s"),
}


def peak_rss_mb():
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    p.add_argument("--steps", type=int, default=20, help="timed steps; 0: at least 10 and 2 s")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check", action="store_true", help="print the parameter count only")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N (steps then end in a sync)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: forward and loss under torch.autocast(bfloat16), f32 weights")
    a = p.parse_args()

    factory, shape, classes, unit = WORKLOADS[a.workload]
    torch.manual_seed(a.seed)
    model = factory()
    params = sum(t.numel() for t in model.parameters())
    if a.check:
        print(json.dumps({"workload": a.workload, "impl": "pytorch", "parameters": params}))
        return
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    tokens = unit == "tokens/s"
    if tokens:
        x = torch.randint(0, classes, shape)
        y = torch.randint(0, classes, shape)
    else:
        x = torch.randn(shape)
        y = torch.randint(0, classes, (shape[0],))
    device = torch.device(a.device)
    model, x, y = model.to(device), x.to(device), y.to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    bf16 = a.precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        # PyTorch's recipe for mixed precision: autocast around forward and loss only; backward
        # runs each op in the dtype its forward used.
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    sync()
    times = []
    cpu_start = time.process_time()  # all threads: CPU time a step costs, whatever the load
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        loss = step()
        sync()  # a GPU queues the step: its time is the time until the queue is empty
        times.append(time.perf_counter() - t0)
        if a.steps > 0 and len(times) >= a.steps:
            break
        if a.steps <= 0 and ((len(times) >= 10 and time.perf_counter() - start >= 2.0)
                             or len(times) >= 500):
            break
    cpu_ms = (time.process_time() - cpu_start) / len(times) * 1e3
    median = statistics.median(times)
    items = math.prod(shape) if tokens else shape[0]
    print(json.dumps({
        "workload": a.workload, "impl": "pytorch", "version": torch.__version__,
        "threads": torch.get_num_threads(), "device": a.device, "precision": a.precision,
        "steps": len(times),
        "warmup": a.warmup,
        "step_ms": median * 1e3, "cpu_ms": cpu_ms, "throughput": items / median, "unit": unit,
        "peak_rss_mb": peak_rss_mb(), "parameters": params, "loss": float(loss.detach()),
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
