"""PyTorch's torch.sparse (CSR and COO) on one matrix of `tessel bench sparse`'s suite.

tessel writes the matrix (CSR: <name>.indptr and <name>.cols as int64, <name>.vals as float32,
<name>.json with rows, cols, nnz, n) and the dense operand (<name>.b: float32 [cols, n]) to a
folder; this script times spmm (A @ B), spmv (A @ x) and add (D + A) for torch's CSR and COO
layouts and prints one JSON object per (op, impl) on stdout:
  {"op": "spmm", "impl": "torch-csr", "time_us": ..., "cpu_us": ..., "checksum": sum of the result}
Timing: 2 untimed calls, then calls until both `--reps` calls and `--min-seconds` have passed;
the median of wall time (time_us) and of the process's CPU time, all threads (cpu_us). torch.set_num_threads(--threads), as tessel's pool.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch


def median_us(fn, reps, min_seconds):
    """Medians of wall and process CPU time per call, in microseconds."""
    fn()
    fn()
    times, cpu = [], []
    start = time.perf_counter()
    while len(times) < reps or time.perf_counter() - start < min_seconds:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpu.append((time.process_time() - c0) * 1e6)
        times.append((time.perf_counter() - t0) * 1e6)
        if len(times) >= 200:
            break
    return statistics.median(times), statistics.median(cpu)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--matrix", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--min-seconds", type=float, default=0.2)
    p.add_argument("--ops", default="spmm,spmv,add")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    base = os.path.join(a.dir, a.matrix)
    meta = json.load(open(base + ".json"))
    rows, cols, n = meta["rows"], meta["cols"], meta["n"]
    indptr = torch.from_numpy(np.fromfile(base + ".indptr", dtype=np.int64))
    col = torch.from_numpy(np.fromfile(base + ".cols", dtype=np.int64))
    vals = torch.from_numpy(np.fromfile(base + ".vals", dtype=np.float32))
    b = torch.from_numpy(np.fromfile(base + ".b", dtype=np.float32).reshape(cols, n))
    x = b[:, 0].contiguous()
    csr = torch.sparse_csr_tensor(indptr, col, vals, size=(rows, cols))
    coo = csr.to_sparse_coo().coalesce()
    d = torch.ones(rows, cols)
    layouts = {"torch-csr": csr, "torch-coo": coo}
    ops = {
        "spmm": lambda m: m @ b,
        "spmv": lambda m: m @ x,
        "add": lambda m: d + m,
    }
    for op in a.ops.split(","):
        for impl, m in layouts.items():
            row = {"op": op, "impl": impl, "torch": torch.__version__}
            try:
                out = ops[op](m)
                if out.layout != torch.strided:
                    out = out.to_dense()
                row["checksum"] = float(out.double().sum())
                row["time_us"], row["cpu_us"] = median_us(lambda: ops[op](m), a.reps,
                                                          a.min_seconds)
            except Exception as e:  # an op torch does not have for this layout
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    sys.exit(main())
