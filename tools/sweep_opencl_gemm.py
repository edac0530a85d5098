#!/usr/bin/env python3
"""Sweeps kernels/gemm.tile's OpenCL block sizes on the OpenCL device (PoCL here) with
`tessel bench gemm`, each configuration in its own run beside CLBlast, and prints
tessel-opencl's GFLOP/s and its ratio to CLBlast in that run (the machine may be shared: only
ratios within one run compare). This is how gemm.tile's `on opencl` defaults were picked; the
tuner (`tessel tune`) searches the same parameters properly.

  tools/sweep_opencl_gemm.py build/tessel [--sizes 512,1024] [CONFIG ...]

A CONFIG is BMxBNxBKxTMxTN (e.g. 32x64x16x4x16); without any, a built-in list is swept.
"""
import json
import subprocess
import sys

DEFAULT_CONFIGS = [
    "32x64x16x4x16", "32x64x32x4x16", "64x64x16x4x16", "64x64x16x8x16", "32x32x16x4x16",
    "32x128x16x4x32", "64x128x16x8x32", "16x64x16x2x16", "32x64x16x8x16", "64x64x16x4x4",
]


def run(tessel, sizes, config):
    bm, bn, bk, tm, tn = config.split("x")
    params = f"BM={bm},BN={bn},BK={bk},TM={tm},TN={tn}"
    out = subprocess.run([tessel, "bench", "gemm", "--json", "--dtypes", "f32", "--sizes", sizes,
                          "--opencl-params", params], capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1:] or ["failed"]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return rows, None


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    tessel, args = argv[1], argv[2:]
    sizes = "512,1024"
    if len(args) >= 2 and args[0] == "--sizes":
        sizes, args = args[1], args[2:]
    configs = args or DEFAULT_CONFIGS
    print(f"{'BMxBNxBKxTMxTN':16} {'m':>5} {'tessel-opencl':>13} {'clblast':>8} {'ratio':>6}")
    for config in configs:
        rows, error = run(tessel, sizes, config)
        if rows is None:
            print(f"{config:16} failed: {error[0]}")
            continue
        by = {(r["impl"], r["m"]): r for r in rows}
        for m in sorted({r["m"] for r in rows}):
            ours, peer = by.get(("tessel-opencl", m)), by.get(("clblast", m))
            if not ours:
                continue
            peer_gflops = peer["gflops"] if peer else float("nan")
            ratio = ours.get("ratio", float("nan"))
            print(f"{config:16} {m:5} {ours['gflops']:13.1f} {peer_gflops:8.1f} {ratio:6.2f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
