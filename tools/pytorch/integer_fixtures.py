#!/usr/bin/env python3
"""Writes src/ops/testdata/integer_cases.txt, PyTorch's results of the element-wise ops on integer
tensors and on mixed dtypes (issue 13), read by src/ops/coverage_integer_test.cpp:

    /opt/torchenv/bin/python tools/pytorch/integer_fixtures.py   # needs torch (CPU)

One case a line, fields separated by '|', integers written exactly (i64 needs all 64 bits):

    op|attrs|dtype shape : values|dtype shape : values|...|=|dtype shape : values

The inputs come first (a bool condition for where), then '=' and PyTorch's output. attrs is
"-" or "min max" for clamp. The values include each type's extremes, so the cases check
wrap-around on overflow, Python's sign rules of floor division and remainder, -2^63 / -1 (but
not for div_trunc, where PyTorch itself dies of SIGFPE: tessel gives -2^63 there too), type
promotion between integer types, with a float tensor, and with 0-d tensors. Then integer pow
(wrapping, 0 ** 0, negative exponents), float floor_divide / remainder / div_trunc (signs, zero
divisors, infinities, -0.0, NaN) in f32, f16 and bf16, and the promotion of mixed floats (f32 with
bf16, bf16 with f16, 0-d operands) in the binary ops and where.
"""
import os

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ops", "testdata",
                   "integer_cases.txt")

NAMES = {torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16", torch.int32: "i32",
         torch.int64: "i64", torch.float32: "f32", torch.bool: "bool", torch.bfloat16: "bf16",
         torch.float16: "f16"}


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
             (i16, i32), (i32, i64), (u8, i64), (i32, f32), (i8, i16), (i16, i64), (i16, f32)]
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
    lines += pow_cases() + float_division_cases() + mixed_float_cases()
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


def line(op, inputs, out):
    return f"{op}|-|" + "|".join(text(t) for t in inputs) + f"|=|{text(out)}"


def pow_cases():
    """Integer pow: by squaring with wrap-around, 0 ** 0 = 1, and PyTorch's tensor-tensor rule for
    negative exponents (1 for a base of 1, +-1 for -1, else 0)."""
    out = []
    for dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        base = torch.tensor(numbers(dt, False), dtype=dt)
        exps = torch.tensor([0, 1, 2, 3, 7, 63, 5, 2, 1], dtype=dt)
        out.append(line("pow", [base, exps], torch.pow(base, exps)))
        base = torch.tensor([0, 1, 3, 2, 7, 9, 0, 1, 5], dtype=dt)
        exps = torch.tensor([0, 40, 5, 8, 3, 2, 3, 0, 11], dtype=dt)
        out.append(line("pow", [base, exps], torch.pow(base, exps)))
        if torch.iinfo(dt).min < 0:
            base = torch.tensor([1, -1, -1, 0, 2, -2, 3, -3, 1], dtype=dt)
            exps = torch.tensor([-1, -2, -3, -1, -1, -5, -100, 0, -7], dtype=dt)
            out.append(line("pow", [base, exps], torch.pow(base, exps)))
    # Promotion: a 0-d exponent of a wider type keeps the tensor's type; a float one gives f32.
    base = torch.tensor([[-3], [2], [5]], dtype=torch.int8)
    for exp in (torch.tensor(3, dtype=torch.int64), torch.tensor([2, 3, 4], dtype=torch.int32),
                torch.tensor(0.5), torch.tensor([2.0, -1.0, 0.5])):
        out.append(line("pow", [base.abs() if exp.is_floating_point() else base, exp],
                        torch.pow(base.abs() if exp.is_floating_point() else base, exp)))
    return out


def float_division_cases():
    """floor_divide, remainder and div_trunc on floats, PyTorch's fmod-based algorithm."""
    inf, nan = float("inf"), float("nan")
    xs = [5.0, -5.0, 5.0, -5.0, 0.0, -0.0, 1.0, inf, -7.5, 3.0, 7.25, -1e30, 1e-30, nan, -3.0,
          0.0, 6.0, -6.0, 1e-3, -inf]
    ys = [3.0, 3.0, -3.0, -3.0, 0.0, 2.0, 0.0, 2.0, inf, -0.0, 0.5, 3.0, -7.0, 1.0, -inf, -2.0,
          -3.0, 3.0, 0.1, -inf]
    out = []
    for op, fn in (("floor_divide", torch.floor_divide), ("remainder", torch.remainder),
                   ("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"))):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            a, b = torch.tensor(xs, dtype=dt), torch.tensor(ys, dtype=dt)
            out.append(line(op, [a, b], fn(a, b)))
        a = torch.tensor([[7.5], [-7.5], [0.25]])
        b = torch.tensor([2, -2, 0], dtype=torch.int32)
        out.append(line(op, [a, b], fn(a, b)))
        c = torch.tensor([7, -8, 100], dtype=torch.int64)
        z = torch.tensor(2.5)
        out.append(line(op, [c, z], fn(c, z)))
    return out


def mixed_float_cases():
    """Two float dtypes: the wider (bf16 with f16: f32), a 0-d operand deciding only across kinds."""
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    a_vals = [1.5, -2.25, 3.0, 0.1, 1000.0, -0.5]
    b_vals = [0.3, 7.0, -1.125, 2.5, 3.0, 4.0]
    out = []
    for op in ("add", "sub", "mul", "div", "maximum", "minimum", "pow", "lt", "eq"):
        fn = BINARY.get(op, torch.pow)
        for ta, tb in ((f32, bf16), (bf16, f16), (f16, f32)):
            a = torch.tensor(a_vals, dtype=ta).abs() if op == "pow" else torch.tensor(a_vals, dtype=ta)
            b = torch.tensor(b_vals, dtype=tb).reshape(2, 3)[:1].expand(2, 3).reshape(6)
            out.append(line(op, [a, b], fn(a, b)))
        # 0-d operands: f32 with a bf16 tensor gives bf16; a 0-d bf16 with an f16 tensor, f16.
        # (A few ops only: each 16-bit result is a kernel specialisation the test compiles.)
        if op not in ("add", "mul", "pow", "lt"):
            continue
        for a, b in ((torch.tensor(a_vals, dtype=bf16), torch.tensor(0.3, dtype=f32)),
                     (torch.tensor(2.5, dtype=f32), torch.tensor(b_vals, dtype=bf16)),
                     (torch.tensor(a_vals, dtype=f16), torch.tensor(1.7, dtype=bf16)),
                     (torch.tensor(a_vals, dtype=torch.int32).abs()
                      if op == "pow" else torch.tensor([1, -2, 3, 0, 1000, -5], dtype=torch.int32),
                      torch.tensor(b_vals, dtype=bf16))):
            if op == "pow":
                a = a.abs()
            out.append(line(op, [a, b], fn(a, b)))
    cond = torch.tensor([True, False, True, True, False, False])
    for a, b in ((torch.tensor(a_vals, dtype=f32), torch.tensor(b_vals, dtype=bf16)),
                 (torch.tensor(a_vals, dtype=bf16), torch.tensor(b_vals, dtype=f16)),
                 (torch.tensor(a_vals, dtype=bf16), torch.tensor(0.7, dtype=f32))):
        out.append(f"where|-|{text(cond)}|{text(a)}|{text(b)}|=|{text(torch.where(cond, a, b))}")
    return out


if __name__ == "__main__":
    main()
