#!/usr/bin/env python3
"""Writes src/ops/testdata/integer_cases.txt, PyTorch's results of the element-wise ops on integer
tensors (issue 13), read by src/ops/coverage_integer_test.cpp:

    /opt/torchenv/bin/python tools/pytorch/integer_fixtures.py   # needs torch (CPU)

One case a line, fields separated by '|', integers written exactly (i64 needs all 64 bits):

    op|attrs|dtype shape : values|dtype shape : values|...|=|dtype shape : values

The inputs come first (a bool condition for where), then '=' and PyTorch's output. attrs is
"-" or "min max" for clamp. The values include each type's extremes, so the cases check
wrap-around on overflow, Python's sign rules of floor division and remainder, -2^63 / -1 (but
not for div_trunc, where PyTorch itself dies of SIGFPE: tessel gives -2^63 there too), type
promotion between integer types, with a float tensor, and with 0-d tensors.
"""
import os

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ops", "testdata",
                   "integer_cases.txt")

NAMES = {torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16", torch.int32: "i32",
         torch.int64: "i64", torch.float32: "f32", torch.bool: "bool", torch.bfloat16: "bf16"}


def numbers(dtype, divisor):
    """Nine values of `dtype`: extremes, small values of both signs; no zero in a divisor."""
    if dtype.is_floating_point:
        return [-7.5, -1.0, 0.5, 2.0, 3.25, -2.0, 100.0, 1.0, -0.25]
    info = torch.iinfo(dtype)
    if info.min == 0:
        vals = [1, 2, 3, 7, 255, 254, 5, 128, 100] if divisor else [0, 1, 7, 254, 255, 128, 3, 9, 200]
    else:
        vals = ([-1, 2, -2, 3, info.max, info.min, -1, -3, 5] if divisor
                else [info.min, info.min + 1, -7, -1, 0, 7, info.min, info.max - 1, info.max])
    return vals


def text(t):
    flat = t.reshape(-1).tolist()
    if t.dtype == torch.bool:
        vals = " ".join("1" if v else "0" for v in flat)
    elif t.dtype.is_floating_point:
        vals = " ".join(f"{v:.10g}" for v in flat)
    else:
        vals = " ".join(str(v) for v in flat)
    shape = " ".join(str(d) for d in t.shape)
    return f"{NAMES[t.dtype]} {shape} : {vals}".replace("  ", " ")


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "floor_divide": torch.floor_divide,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": torch.remainder, "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
}
DIVIDES = {"div", "floor_divide", "div_trunc", "remainder"}


def main():
    lines = []
    i8, u8, i16, i32, i64, f32 = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                                  torch.float32)
    pairs = [(i8, i8), (u8, u8), (i16, i16), (i32, i32), (i64, i64), (i8, u8), (u8, i16),
             (i16, i32), (i32, i64), (u8, i64), (i32, f32)]
    for op, fn in BINARY.items():
        for ta, tb in pairs:
            if op in {"floor_divide", "div_trunc", "remainder"} and tb.is_floating_point:
                continue
            a = torch.tensor(numbers(ta, False), dtype=ta)
            vals = numbers(tb, op in DIVIDES)
            if op == "div_trunc":  # PyTorch dies of SIGFPE on -2^31 / -1 and -2^63 / -1
                vals = [2 if v == -1 else v for v in vals]
            b = torch.tensor(vals, dtype=tb)
            lines.append(f"{op}|-|{text(a)}|{text(b)}|=|{text(fn(a, b))}")
        # Broadcasting [3, 1] with [3], and 0-d operands, which do not promote a same-kind
        # operand (i8 with a 0-d i64 stays i8) but do bring a float (i32 with a 0-d f32: f32).
        a = torch.tensor([[-9], [4], [127]], dtype=i8)
        b = torch.tensor([2, -3, 5], dtype=i8)
        lines.append(f"{op}|-|{text(a)}|{text(b)}|=|{text(fn(a, b))}")
        zero_d = torch.tensor(3, dtype=i64)
        lines.append(f"{op}|-|{text(a)}|{text(zero_d)}|=|{text(fn(a, zero_d))}")
        zero_f = torch.tensor(2.5, dtype=f32)
        if op not in {"floor_divide", "div_trunc", "remainder"}:
            c = torch.tensor([7, -8, 100], dtype=i32)
            lines.append(f"{op}|-|{text(c)}|{text(zero_f)}|=|{text(fn(c, zero_f))}")
    for dt in (i8, u8, i16, i32, i64):
        a = torch.tensor(numbers(dt, False), dtype=dt)
        lines.append(f"abs|-|{text(a)}|=|{text(torch.abs(a))}")
        lines.append(f"neg|-|{text(a)}|=|{text(torch.neg(a))}")
        lines.append(f"clamp|-5 100|{text(a)}|=|{text(torch.clamp(a, -5, 100))}")
        lines.append(f"clamp|-300 300|{text(a)}|=|{text(torch.clamp(a, -300, 300))}")
        lines.append(f"exp|-|{text(torch.tensor([0, 1, 2], dtype=dt))}|=|"
                     f"{text(torch.exp(torch.tensor([0, 1, 2], dtype=dt)))}")
        cond = torch.tensor([True, False, True, False, True, False, True, False, True])
        b = torch.tensor(numbers(i32, True), dtype=i32)
        lines.append(f"where|-|{text(cond)}|{text(a)}|{text(b)}|=|{text(torch.where(cond, a, b))}")
    a = torch.tensor([1, 5, 9], dtype=i32)
    lines.append(f"clamp|2.5 7|{text(a)}|=|{text(torch.clamp(a, 2.5, 7))}")
    cond = torch.tensor([True, False, True])
    lines.append(f"where|-|{text(cond)}|{text(a)}|{text(torch.tensor([0.5, 1.5, 2.5]))}|=|"
                 f"{text(torch.where(cond, a, torch.tensor([0.5, 1.5, 2.5])))}")
    with open(OUT, "w") as f:
        f.write("# Written by tools/pytorch/integer_fixtures.py with torch "
                f"{torch.__version__}; do not edit.\n")
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} cases -> {OUT}")
    for what, fn in [("floor_divide by 0", lambda: torch.floor_divide(torch.tensor([1]),
                                                                      torch.tensor([0]))),
                     ("remainder by 0", lambda: torch.remainder(torch.tensor([1]),
                                                                torch.tensor([0])))]:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - we print what PyTorch raises
            print(f"{what}: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
