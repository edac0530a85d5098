#!/usr/bin/env python3
"""Writes the PyTorch parity fixtures that src/nn/gpt_parity_test.cpp compares tessel against.

    python tools/pytorch/make_fixtures.py            # needs torch and safetensors (PyPI), CPU only
    -> src/nn/testdata/gpt_parity.safetensors

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(REPO, "src", "nn", "testdata"),
                        help="folder for the fixtures (default: src/nn/testdata)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one summation order, so a rerun writes the same bytes
    os.makedirs(args.out, exist_ok=True)
    gpt_fixture(os.path.join(args.out, "gpt_parity.safetensors"))


if __name__ == "__main__":
    main()
