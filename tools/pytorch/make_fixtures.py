#!/usr/bin/env python3
"""Writes the PyTorch parity fixtures that src/nn/gpt_parity_test.cpp and
src/nn/image_parity_test.cpp compare tessel against.

    python tools/pytorch/make_fixtures.py            # needs torch and safetensors (PyPI), CPU only
    -> src/nn/testdata/gpt_parity.safetensors
       src/nn/testdata/cnn_parity.safetensors             (nn/cnn.h's SmallCnn)
       src/nn/testdata/resnet_basic_parity.safetensors    (nn/resnet.h, BasicBlock, tiny widths)
       src/nn/testdata/resnet_bottleneck_parity.safetensors  (Bottleneck, ImageNet stem, tiny)

A small GPT (nanoGPT's architecture and parameter names: V=65, T=16, L=2, H=2, C=32, batch 4) is
built with fixed seeds; the fixture holds, under these names:

    param.<name>     every parameter before training (name as model.named_parameters() gives it)
    grad.<name>      its gradient of the mean cross-entropy at those weights
    input.ids        i64 [B, T] token ids;  input.targets  i64 [B, T]
    output.logits    [B, T, V];  output.loss  [] (mean cross-entropy)
    adamw.losses     [5]: the loss at each of 5 steps of torch.optim.AdamW(lr=1e-3, PyTorch's
                     defaults: betas (0.9, 0.999), eps 1e-8, weight_decay 0.01), each loss measured
                     before that step's update (so adamw.losses[0] == output.loss)

Layout: weights are stored exactly as PyTorch holds them. nn.Linear's weight is [out, in], and so
is tessel's nn::Linear, so nothing is transposed, here or in the test. (HF's GPT-2 checkpoints use
Conv1D, [in, out]; this model uses nn.Linear as nanoGPT does.) The head is tied to wte, so there is
no lm_head.weight entry: its gradient is part of grad.transformer.wte.weight.

Every reference value is computed in float64 and stored as float32, so the test's tolerances
measure tessel's float32 error alone. The metadata records how far PyTorch's own float32 run is
from that reference (torch_f32_max_abs.*), the scale against which the test's tolerances are set.

Weights: nanoGPT's initialisation would leave LayerNorm weights 1, biases 0 and attention nearly
uniform, which hides some mistakes (a swapped weight and bias, a mask off by one), so every
parameter is drawn at random instead: matrices N(0, 0.1), biases N(0, 0.05), LayerNorm weights
1 + N(0, 0.1), LayerNorm biases N(0, 0.1).

The image models (SmallCnn and two tiny ResNets, all with batch norm in training mode) are stored
the same way, with inputs `input.images` f32 [N, C, H, W] and `input.targets` i64 [N], and also:

    buffer.<name>        every buffer before training (batch norm running_mean, running_var:
                         random too, so the momentum update is tested from non-trivial values;
                         num_batches_tracked 0)
    after.<name>         every buffer after the training forwards: the one that gave output.* and
                         grad.*, then one per AdamW step (6 in all, so num_batches_tracked is 6)
    eval.logits          [N, classes] in evaluation mode (running statistics) at the initial
                         weights and buffers. (Not after the steps: Adam moves a weight whose
                         gradient is float noise, such as a convolution bias before batch norm,
                         by up to lr per step, which training mode cancels and evaluation mode
                         does not; see the test's tolerances for after.*.)

Convolution and linear weights are normal with standard deviation 1/sqrt(fan_in), so activations
stay of order 1 without torchvision's initialisation; batch norm weights 1 + N(0, 0.1), biases
N(0, 0.1); other biases N(0, 0.05) (standard deviations, as above). Inputs are N(0, 1). The
ResNet classes below are torchvision's with scalable widths; when torchvision is installed the
script checks that at width 64 they give torchvision's names and shapes.

The committed files stay small: SmallCnn takes 6x6 images (6 -> 3 -> 1 through the two 2x2
max-pools, which also tests the pools' floor on odd sizes; fc1 is then 64 -> 128, not 3136 -> 128),
and the ResNets have widths 4..32 (BasicBlock) and 2..16 (Bottleneck, so 8..64 channels out).
"""

import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


# ---- nanoGPT's model (github.com/karpathy/nanoGPT, model.py), without dropout ----

class CausalSelfAttention(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.n_head = h
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, h)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, v, t, l, h, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(v, c),
            wpe=nn.Embedding(t, c),
            h=nn.ModuleList([Block(c, h) for _ in range(l)]),
            ln_f=nn.LayerNorm(c),
        ))
        self.lm_head = nn.Linear(c, v, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, ids):
        t = ids.size(1)
        x = self.transformer.wte(ids) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def randomise(model, generator):
    """Every parameter random (see the module docstring for why not nanoGPT's init)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name and name.endswith(".weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=generator))
            elif ".ln_" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))


def run(model, ids, targets, steps):
    """Logits, loss and gradients at the current weights, then the losses of `steps` AdamW steps."""
    logits = model(ids)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        logits_k = model(ids)
        loss_k = F.cross_entropy(logits_k.view(-1, logits_k.size(-1)), targets.view(-1))
        losses.append(loss_k.item())
        opt.zero_grad()
        loss_k.backward()
        opt.step()
    return logits.detach(), loss.detach(), grads, torch.tensor(losses, dtype=torch.float64)


def gpt_fixture(path):
    v, t, l, h, c, b, steps = 65, 16, 2, 2, 32, 4, 5
    generator = torch.Generator().manual_seed(1234)
    reference = GPT(v, t, l, h, c)
    randomise(reference, generator)
    ids = torch.randint(0, v, (b, t), generator=generator)
    targets = torch.randint(0, v, (b, t), generator=generator)
    params = {n: p.detach().clone() for n, p in reference.named_parameters()}

    model64 = GPT(v, t, l, h, c).double()
    model64.load_state_dict(reference.state_dict())
    logits, loss, grads, losses = run(model64, ids, targets, steps)

    model32 = GPT(v, t, l, h, c)
    model32.load_state_dict(reference.state_dict())
    logits32, loss32, grads32, losses32 = run(model32, ids, targets, steps)
    def max_abs(a, b):
        return (a.double() - b.double()).abs().max().item()

    metadata = {
        "model": "nanoGPT (no dropout), tied head",
        "config": f"vocab_size={v} block_size={t} n_layer={l} n_head={h} n_embd={c} batch={b}",
        "optimizer": "torch.optim.AdamW(lr=1e-3) defaults: betas=(0.9, 0.999) eps=1e-8 "
                     "weight_decay=0.01; losses before each update",
        "reference": "float64, stored as float32",
        "linear_weight_layout": "[out, in] (torch.nn.Linear)",
        "torch_version": torch.__version__,
        "torch_f32_max_abs.logits": f"{max_abs(logits32, logits):.3e}",
        "torch_f32_max_abs.loss": f"{max_abs(loss32, loss):.3e}",
        "torch_f32_max_abs.grads": f"{max(max_abs(grads32[n], grads[n]) for n in grads):.3e}",
        "torch_f32_max_abs.adamw_losses": f"{max_abs(losses32, losses):.3e}",
    }
    tensors = {"input.ids": ids, "input.targets": targets,
               "output.logits": logits.float(), "output.loss": loss.float(),
               "adamw.losses": losses.float()}
    tensors.update({"param." + n: p.float() for n, p in params.items()})
    tensors.update({"grad." + n: g.float() for n, g in grads.items()})
    save_file({k: x.contiguous() for k, x in tensors.items()}, path, metadata=metadata)
    print(f"wrote {path} ({os.path.getsize(path)} bytes): loss {loss.item():.6f}, "
          f"adamw losses {[round(x, 6) for x in losses.tolist()]}")
    for k, value in metadata.items():
        if k.startswith("torch_f32"):
            print(f"  {k} = {value}")


# ---- image models: tessel's nn/cnn.h and nn/resnet.h, written as PyTorch would ----

class SmallCnn(nn.Module):
    """nn/cnn.h's SmallCnn (shared/WORKLOADS.md's cnn at image_size 28)."""

    def __init__(self, classes=10, image_size=28):
        super().__init__()
        side = image_size // 2 // 2  # two 2x2 max-pools, each rounding down
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * side * side, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


# torchvision.models.resnet's BasicBlock, Bottleneck and ResNet (groups 1, dilation 1), with the
# widths scaled by base_width (64 in torchvision, where these classes give its very names and
# shapes) so that a fixture of the same structure stays small, and the CIFAR stem as an option.

def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)  # v1.5: the stride is here
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, classes, base_width=64, stem="imagenet", in_channels=3):
        super().__init__()
        self.inplanes = base_width
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_channels, base_width, 7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        else:
            self.conv1 = conv3x3(in_channels, base_width)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(base_width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, base_width, layers[0])
        self.layer2 = self._make_layer(block, base_width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, base_width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, base_width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(base_width * 8 * block.expansion, classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def check_against_torchvision():
    """With torchvision installed, ResNet above at base_width 64 must have torchvision's names
    and shapes (tools/pytorch/make_resnet_manifest.py checks tessel against torchvision itself)."""
    try:
        import torchvision.models as models
    except ImportError:
        print("torchvision not installed: ResNet's names not checked against it")
        return
    for name, block, layers in (("resnet18", BasicBlock, [2, 2, 2, 2]),
                                ("resnet50", Bottleneck, [3, 4, 6, 3])):
        ours = {n: tuple(t.shape) for n, t in ResNet(block, layers, 1000).state_dict().items()}
        theirs = {n: tuple(t.shape) for n, t in
                  getattr(models, name)(weights=None).state_dict().items()}
        assert ours == theirs, f"{name}: the script's ResNet differs from torchvision's"
    print("the script's ResNet has torchvision's names and shapes")


def randomise_image_model(model, generator):
    """Every parameter and batch-norm statistic random (see the module docstring)."""
    bn_names = {n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    with torch.no_grad():
        for name, p in model.named_parameters():
            owner, leaf = name.rsplit(".", 1)
            if owner in bn_names:
                p.copy_((1.0 if leaf == "weight" else 0.0) + 0.1 * torch.randn(p.shape,
                                                                              generator=generator))
            elif leaf == "bias":
                p.copy_(0.05 * torch.randn(p.shape, generator=generator))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(fan_in))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=generator))
            elif name.endswith("running_var"):
                b.copy_(1 + 0.5 * torch.rand(b.shape, generator=generator))


def run_image_model(model, images, targets, steps):
    """As run(), for a classifier with batch norm: also the evaluation-mode logits at the initial
    weights and buffers, and the buffers after the training forwards."""
    model.eval()
    with torch.no_grad():
        eval_logits = model(images)
    model.train()
    logits, loss, grads, losses = run(model, images, targets, steps)
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    return logits, loss, grads, losses, buffers, eval_logits


def image_fixture(path, make, config, input_shape, classes):
    batch, steps = input_shape[0], 5
    generator = torch.Generator().manual_seed(4321)
    reference = make()
    randomise_image_model(reference, generator)
    images = torch.randn(input_shape, generator=generator)
    targets = torch.randint(0, classes, (batch,), generator=generator)
    params = {n: p.detach().clone() for n, p in reference.named_parameters()}
    buffers = {n: b.detach().clone() for n, b in reference.named_buffers()}

    model64 = make().double()
    model64.load_state_dict(reference.state_dict())
    logits, loss, grads, losses, after, eval_logits = run_image_model(
        model64, images.double(), targets, steps)

    model32 = make()
    model32.load_state_dict(reference.state_dict())
    logits32, loss32, grads32, losses32, after32, eval32 = run_image_model(
        model32, images, targets, steps)

    def max_abs(a, b):
        return (a.double() - b.double()).abs().max().item()

    def f32(t):
        return t.float() if t.is_floating_point() else t

    metadata = {
        "config": config,
        "optimizer": "torch.optim.AdamW(lr=1e-3) defaults: betas=(0.9, 0.999) eps=1e-8 "
                     "weight_decay=0.01; losses before each update",
        "batch_norm": "training mode, momentum 0.1, eps 1e-5; after.* follow 1 + 5 forwards",
        "reference": "float64, stored as float32",
        "torch_version": torch.__version__,
        "torch_f32_max_abs.logits": f"{max_abs(logits32, logits):.3e}",
        "torch_f32_max_abs.loss": f"{max_abs(loss32, loss):.3e}",
        "torch_f32_max_abs.grads": f"{max(max_abs(grads32[n], grads[n]) for n in grads):.3e}",
        "torch_f32_max_abs.adamw_losses": f"{max_abs(losses32, losses):.3e}",
        "torch_f32_max_abs.after": f"{max(max_abs(after32[n], after[n]) for n in after):.3e}",
        "torch_f32_max_abs.eval_logits": f"{max_abs(eval32, eval_logits):.3e}",
    }
    tensors = {"input.images": images, "input.targets": targets,
               "output.logits": logits.float(), "output.loss": loss.float(),
               "adamw.losses": losses.float(), "eval.logits": eval_logits.float()}
    tensors.update({"param." + n: p.float() for n, p in params.items()})
    tensors.update({"buffer." + n: f32(b) for n, b in buffers.items()})
    tensors.update({"grad." + n: g.float() for n, g in grads.items()})
    tensors.update({"after." + n: f32(b) for n, b in after.items()})
    save_file({k: x.contiguous() for k, x in tensors.items()}, path, metadata=metadata)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, "
          f"{sum(p.numel() for p in params.values())} parameters): loss {loss.item():.6f}, "
          f"adamw losses {[round(x, 6) for x in losses.tolist()]}")
    for k, value in metadata.items():
        if k.startswith("torch_f32"):
            print(f"  {k} = {value}")


# name -> (model builder, config string the test checks, input shape, classes).
IMAGE_MODELS = {
    "cnn": (lambda: SmallCnn(classes=10, image_size=6),
            "SmallCnn classes=10 image_size=6 batch=4", (4, 1, 6, 6), 10),
    "resnet_basic": (lambda: ResNet(BasicBlock, [1, 1, 1, 1], 5, base_width=4, stem="cifar"),
                     "ResNet block=basic blocks=1,1,1,1 base_width=4 stem=cifar classes=5 "
                     "input=4x3x12x12", (4, 3, 12, 12), 5),
    "resnet_bottleneck": (lambda: ResNet(Bottleneck, [2, 1, 1, 1], 5, base_width=2,
                                         stem="imagenet"),
                          "ResNet block=bottleneck blocks=2,1,1,1 base_width=2 stem=imagenet "
                          "classes=5 input=2x3x36x36", (2, 3, 36, 36), 5),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["gpt"] + list(IMAGE_MODELS),
                        help="write one fixture (the header's metadata order differs from run to "
                             "run, so rewriting an unchanged fixture changes its bytes)")
    parser.add_argument("--out", default=os.path.join(REPO, "src", "nn", "testdata"),
                        help="folder for the fixtures (default: src/nn/testdata)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one summation order, so a rerun writes the same bytes
    os.makedirs(args.out, exist_ok=True)
    if args.only in (None, "gpt"):
        gpt_fixture(os.path.join(args.out, "gpt_parity.safetensors"))
    check_against_torchvision()
    for name, (make, config, input_shape, classes) in IMAGE_MODELS.items():
        if args.only not in (None, name):
            continue
        image_fixture(os.path.join(args.out, f"{name}_parity.safetensors"), make, config,
                      input_shape, classes)


if __name__ == "__main__":
    main()
