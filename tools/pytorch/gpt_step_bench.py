#!/usr/bin/env python3
"""PyTorch's side of src/nn/gpt_bench.cpp: the median training-step time of a GPT workload of
shared/WORKLOADS.md (nanoGPT's model from make_fixtures.py, AdamW lr 1e-3, ids held in memory).

    python tools/pytorch/gpt_step_bench.py --workload gpt_tiny --steps 30 --threads 2
    -> "median_ms 12.34" (and the torch version)
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import GPT  # noqa: E402

WORKLOADS = {  # vocab, context, layers, heads, width, batch
    "gpt_tiny": (65, 64, 4, 4, 128, 12),
    "gpt_mini": (65, 256, 6, 6, 384, 8),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="gpt_tiny")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    v, t, l, h, c, b = WORKLOADS[args.workload]
    model = GPT(v, t, l, h, c)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, v, (b, t))
    targets = torch.randint(0, v, (b, t))

    def step():
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, v), targets.view(-1))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"torch {torch.__version__}")
    print(f"median_ms {times[len(times) // 2] * 1e3:.4f}")


if __name__ == "__main__":
    main()
