#!/usr/bin/env python3
"""Writes the PyTorch fixtures of the op coverage tests (issue 13) that need more than a closed
form: src/ops/testdata/<family>_cases.txt, read by src/ops/coverage_<family>_test.cpp through
src/ops/testing/fixture.h.

    /opt/torchenv/bin/python tools/pytorch/coverage_fixtures.py   # needs torch (CPU)

Each case is the op's name and a label, its attributes as tessel's op takes them, its inputs, the
outputs PyTorch gives (in float64, from the same float32 inputs) and, for differentiable ops, an
output gradient `gy` and the input gradients of sum(gy * y):

    case max_pool2d ceil_mode_partial_windows
    attr window I 3 3
    tensor x 4 1 2 5 7 : 0.25 -1.5 ...
    end

Where PyTorch has no such option (ONNX's asymmetric pads), the reference is PyTorch on an
explicitly padded input. The script also prints what PyTorch raises for the error cases the tests
check (nothing of that is read by the build).
"""
import math
import os

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ops", "testdata")


def fmt(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.10g}"  # float32 inputs exactly, references to 1e-10


class Writer:
    def __init__(self, family, what):
        self.path = os.path.join(OUT, f"{family}_cases.txt")
        self.lines = [f"# {what}", "# Written by tools/pytorch/coverage_fixtures.py; do not edit."]

    def case(self, op, label, attrs, tensors):
        self.lines.append(f"case {op} {label}")
        for name, value in attrs.items():
            listed = isinstance(value, (list, tuple))
            vals = value if listed else [value]
            kind = "r" if any(isinstance(v, float) for v in vals) else "i"
            kind = kind.upper() if listed else kind  # a list (R, I) or one value (r, i)
            self.lines.append(f"attr {name} {kind} " + " ".join(str(v) for v in vals))
        for name, t in tensors.items():
            t = t.detach()
            vals = " ".join(fmt(v) for v in t.double().flatten().tolist())
            dims = " ".join(str(d) for d in t.shape)
            self.lines.append(f"tensor {name} {t.dim()} {dims} : {vals}".replace("  ", " "))
        self.lines.append("end")

    def write(self):
        os.makedirs(OUT, exist_ok=True)
        with open(self.path, "w") as f:
            f.write("\n".join(self.lines) + "\n")
        print(f"wrote {self.path}")


def f32(*shape):
    """Random float32 values, returned as float64 (exact) for the reference."""
    return torch.randn(*shape).float().double()


def with_grads(f, inputs, differentiable):
    """f(*inputs) and, for a random gy, the gradients of sum(gy * y) w.r.t. the differentiable."""
    leaves = [x.clone().requires_grad_(d) for x, d in zip(inputs, differentiable)]
    y = f(*leaves)
    gy = f32(*y.shape)
    (y * gy).sum().backward()
    return y, gy, [x.grad for x, d in zip(leaves, differentiable) if d]


def pool_fn(kind, dims, window, stride, padding, dilation, ceil_mode, count_include_pad,
            divisor_override):
    if kind == "max":
        f = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[dims]
        return lambda x, **kw: f(x, window, stride, padding, dilation, ceil_mode, **kw)
    f = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[dims]
    if dims == 1:  # avg_pool1d has no divisor_override
        assert divisor_override is None
        return lambda x: f(x, window, stride, padding, ceil_mode, count_include_pad)
    return lambda x: f(x, window, stride, padding, ceil_mode, count_include_pad, divisor_override)


def pool_case(w, kind, label, x, window, stride=None, padding=0, dilation=1, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    dims = len(window)
    stride = stride or window
    op = f"{kind}_pool{dims}d"
    attrs = {"window": list(window), "stride": list(stride)}
    pad = padding if isinstance(padding, (list, tuple)) else [padding] * dims
    if any(pad):
        attrs["padding"] = list(pad)
    if kind == "max" and dilation != 1:
        attrs["dilation"] = dilation if isinstance(dilation, list) else [dilation] * dims
    if ceil_mode:
        attrs["ceil_mode"] = 1
    if kind == "avg" and not count_include_pad:
        attrs["count_include_pad"] = 0
    if divisor_override is not None:
        attrs["divisor_override"] = divisor_override
    f = pool_fn(kind, dims, tuple(window), tuple(stride), tuple(pad),
                tuple(attrs.get("dilation", [1] * dims)), ceil_mode, count_include_pad,
                divisor_override)
    y, gy, (gx,) = with_grads(f, [x], [True])
    tensors = {"x": x, "y": y}
    if kind == "max":
        tensors["indices"] = f(x, return_indices=True)[1]
    tensors.update({"gy": gy, "gx": gx})
    w.case(op, label, attrs, tensors)


def onnx_pool_case(w, kind, label, x, window, stride, pads, count_include_pad=True):
    """2-d pooling with ONNX pads [top, left, bottom, right]: PyTorch on the padded input."""
    top, left, bottom, right = pads
    filler = -math.inf if kind == "max" else 0.0

    def f(t):
        padded = F.pad(t, (left, right, top, bottom), value=filler)
        if kind == "max":
            return F.max_pool2d(padded, window, stride)
        total = F.avg_pool2d(padded, window, stride, divisor_override=1)
        if count_include_pad:
            return total / (window[0] * window[1])
        ones = F.pad(torch.ones_like(t), (left, right, top, bottom))
        return total / F.avg_pool2d(ones, window, stride, divisor_override=1)

    y, gy, (gx,) = with_grads(f, [x], [True])
    attrs = {"window": list(window), "stride": list(stride), "pads": [top, left, bottom, right]}
    if not count_include_pad:
        attrs["count_include_pad"] = 0
    tensors = {"x": x, "y": y}
    if kind == "max":
        padded = F.pad(x, (left, right, top, bottom), value=-math.inf)
        _, idx = F.max_pool2d(padded, window, stride, return_indices=True)
        wp = x.shape[3] + left + right
        tensors["indices"] = (idx // wp - top) * x.shape[3] + (idx % wp - left)
    tensors.update({"gy": gy, "gx": gx})
    w.case(f"{kind}_pool2d", label, attrs, tensors)


def pool_cases():
    torch.manual_seed(13)
    w = Writer("pool", "Pooling options against torch.nn.functional (src/ops/coverage_pool_test.cpp).")
    pool_case(w, "max", "ceil_mode_partial_windows", f32(1, 2, 5, 7), [3, 3], [2, 2],
              ceil_mode=True)
    pool_case(w, "max", "dilation_2_padding_1", f32(1, 2, 6, 7), [3, 3], [1, 2], padding=1,
              dilation=2)
    pool_case(w, "max", "ceil_mode_window_past_input", f32(1, 1, 2, 2), [3, 3], [2, 2],
              ceil_mode=True)
    x = f32(1, 2, 4, 5)
    x[0, 0, 1, 1] = math.nan  # one NaN: it wins every window holding it
    x[0, 1, 0, 0] = math.nan  # two NaNs in one window: the last wins
    x[0, 1, 1, 1] = math.nan
    x[0, 1, 3, 3] = math.inf
    pool_case(w, "max", "nan_propagates", x, [2, 2], [1, 1])
    x = torch.full((1, 1, 3, 4), -math.inf, dtype=torch.float64)
    x[0, 0, 2, 3] = 1.0
    pool_case(w, "max", "all_minus_inf_window_first_element", x, [2, 2], [1, 2], padding=1)
    # Windows that tile the input (stride = window, no padding): ops/pool_ops.cpp's tiled kernels.
    # NaNs (one, two in a window), a window of -inf only, ties, and rows/columns past the last
    # window (whose gradient is 0).
    x = f32(2, 3, 5, 7)
    x[0, 0, 0, 1] = math.nan
    x[0, 1, 2, 2] = math.nan
    x[0, 1, 3, 3] = math.nan
    x[1, 0, 0:2, 0:2] = -math.inf
    x[1, 2, 2:4, 4:6] = 0.5
    pool_case(w, "max", "tiled_windows_nan_inf_ties_remainder", x, [2, 2])
    pool_case(w, "max", "tiled_windows_3x2", f32(1, 2, 6, 4), [3, 2])
    pool_case(w, "max", "tiled_windows_1d", f32(1, 2, 9), [2])
    pool_case(w, "avg", "ceil_mode_count_include_pad", f32(1, 2, 6, 5), [3, 3], [2, 2],
              padding=1, ceil_mode=True)
    pool_case(w, "avg", "ceil_mode_count_exclude_pad", f32(1, 2, 6, 5), [3, 3], [2, 2],
              padding=1, ceil_mode=True, count_include_pad=False)
    pool_case(w, "avg", "divisor_override", f32(2, 1, 5, 6), [2, 3], [2, 2], padding=[1, 1],
              divisor_override=5)
    pool_case(w, "avg", "divisor_override_negative_ceil", f32(1, 1, 5, 5), [2, 2], [2, 2],
              ceil_mode=True, divisor_override=-3)
    onnx_pool_case(w, "max", "onnx_pads_asymmetric", f32(1, 2, 5, 6), [2, 3], [2, 1],
                   [1, 0, 0, 2])
    onnx_pool_case(w, "avg", "onnx_pads_asymmetric", f32(1, 2, 5, 6), [2, 3], [2, 1],
                   [1, 0, 0, 2])
    onnx_pool_case(w, "avg", "onnx_pads_asymmetric_exclude_pad", f32(1, 2, 5, 6), [2, 3], [2, 1],
                   [1, 2, 0, 2], count_include_pad=False)
    onnx_pool_case(w, "avg", "onnx_pads_beyond_half_window", f32(1, 1, 3, 3), [2, 2], [1, 1],
                   [2, 0, 0, 3])
    pool_case(w, "max", "pool1d_ceil_dilation", f32(2, 3, 9), [3], [2], padding=1, dilation=2,
              ceil_mode=True)
    pool_case(w, "avg", "pool1d_exclude_pad_ceil", f32(2, 3, 8), [3], [2], padding=1,
              ceil_mode=True, count_include_pad=False)
    pool_case(w, "max", "pool3d", f32(1, 2, 4, 5, 6), [2, 3, 2], [2, 2, 1], padding=[1, 1, 0])
    pool_case(w, "max", "pool3d_ceil_dilation", f32(1, 1, 5, 4, 5), [2, 2, 2], [2, 1, 2],
              dilation=[2, 1, 1], ceil_mode=True)
    pool_case(w, "avg", "pool3d_ceil_exclude_pad", f32(1, 2, 5, 4, 5), [3, 2, 2], [2, 2, 2],
              padding=[1, 1, 0], ceil_mode=True, count_include_pad=False)
    pool_case(w, "avg", "pool3d_divisor_override", f32(1, 1, 4, 4, 4), [2, 2, 2], [2, 2, 2],
              divisor_override=3)
    w.write()


def show(name, f):
    try:
        r = f()
        print(f"{name} -> {tuple(r.shape)} {r.flatten()[:6].tolist()}")
    except Exception as e:  # noqa: BLE001 - the error is the answer
        print(f"{name} -> ERROR {type(e).__name__} {str(e).splitlines()[0][:150]}")


def pool_errors():
    x = torch.randn(1, 1, 4, 4)
    show("max_pool2d padding 2 > window 3 / 2", lambda: F.max_pool2d(x, 3, 1, 2))
    show("avg_pool2d divisor_override 0", lambda: F.avg_pool2d(x, 2, divisor_override=0))
    show("max_pool2d 5x5 on 4x4", lambda: F.max_pool2d(x, 5))
    show("max_pool2d 2x2 dilation 3 padding 1 on 2x2 (a window of padding only)",
         lambda: F.max_pool2d(torch.randn(1, 1, 2, 2), 2, 1, 1, 3))


def conv_case(w, op, label, x, weight, bias, **attrs):
    f = {"conv_transpose2d": F.conv_transpose2d, "conv_transpose1d": F.conv_transpose1d,
         "conv1d": F.conv1d, "conv3d": F.conv3d}[op]
    y, gy, (gx, gw, gb) = with_grads(lambda a, b, c: f(a, b, c, **attrs), [x, weight, bias],
                                     [True, True, True])
    tessel_attrs = {k: (list(v) if isinstance(v, (list, tuple)) else
                        (v if k == "groups" else [v])) for k, v in attrs.items()}
    w.case(op, label, tessel_attrs, {"x": x, "weight": weight, "bias": bias, "y": y, "gy": gy,
                                     "gx": gx, "gweight": gw, "gbias": gb})


def conv_cases():
    torch.manual_seed(31)
    w = Writer("conv", "conv_transpose2d and the 1-d convolutions against torch.nn.functional "
                       "(src/ops/coverage_conv_test.cpp).")
    conv_case(w, "conv_transpose2d", "stride_2_padding_1_output_padding_1", f32(2, 3, 4, 5),
              f32(3, 2, 3, 3), f32(2), stride=[2, 2], padding=[1, 1], output_padding=[1, 1])
    conv_case(w, "conv_transpose2d", "groups_dilation_output_padding_past_stride",
              f32(1, 4, 3, 3), f32(4, 3, 2, 3), f32(6), stride=[1, 2], padding=[0, 1],
              output_padding=[1, 1], dilation=[2, 1], groups=2)
    conv_case(w, "conv_transpose2d", "deep_channels_implicit_gemm", f32(1, 16, 3, 4),
              f32(16, 4, 3, 3), f32(4), stride=[2, 2], padding=[1, 0])
    conv_case(w, "conv_transpose2d", "one_by_one_unit_stride", f32(2, 3, 2, 2), f32(3, 5, 1, 1),
              f32(5))
    conv_case(w, "conv_transpose1d", "stride_3_output_padding_2_groups_2", f32(2, 4, 6),
              f32(4, 1, 3), f32(2), stride=3, padding=1, output_padding=2, groups=2)
    conv_case(w, "conv1d", "stride_2_padding_1_dilation_2", f32(2, 3, 11), f32(4, 3, 3), f32(4),
              stride=2, padding=1, dilation=2)
    conv_case(w, "conv1d", "depthwise", f32(1, 4, 9), f32(4, 1, 4), f32(4), padding=2, groups=4)
    conv_case(w, "conv3d", "stride_2_1_2_padding_1_1_0", f32(2, 3, 5, 6, 5), f32(4, 3, 3, 3, 2),
              f32(4), stride=[2, 1, 2], padding=[1, 1, 0])
    conv_case(w, "conv3d", "groups_2_dilation_2_1_2", f32(1, 4, 6, 5, 5), f32(6, 2, 2, 3, 3),
              f32(6), padding=[1, 0, 1], dilation=[2, 1, 2], groups=2)
    conv_case(w, "conv3d", "deep_channels_implicit_gemm", f32(1, 16, 3, 4, 4),
              f32(4, 16, 2, 3, 3), f32(4), padding=[1, 1, 1])
    conv_case(w, "conv3d", "depth_stride_past_the_window", f32(2, 2, 7, 3, 3), f32(3, 2, 1, 2, 2),
              f32(3), stride=[3, 1, 1])
    w.write()


def attention_case(w, label, q, k, v, mask=None, is_causal=False, lower_right=False, scale=None,
                   enable_gqa=False):
    float_mask = mask is not None and mask.dtype != torch.bool

    def f(q_, k_, v_, *m_):
        m = m_[0] if m_ else mask
        if lower_right:  # PyTorch's CausalBias gives NaN for rows without keys: the same mask
            length, keys = q_.shape[-2], k_.shape[-2]  # as a boolean one gives zeros there
            m = torch.ones(length, keys, dtype=torch.bool).tril(diagonal=keys - length)
        return F.scaled_dot_product_attention(q_, k_, v_, attn_mask=m, is_causal=is_causal,
                                              scale=scale, enable_gqa=enable_gqa)

    # A float mask has a gradient too (gmask, summed over the dimensions it is broadcast along).
    inputs = [q, k, v] + ([mask] if float_mask else [])
    y, gy, grads = with_grads(f, inputs, [True] * len(inputs))
    gq, gk, gv = grads[:3]
    attrs = {"mask": 0 if mask is None else 1 if mask.dtype == torch.bool else 2,  # tessel's
             "causal": 2 if lower_right else 1 if is_causal else 0,
             "enable_gqa": int(enable_gqa)}
    if scale is not None:
        attrs["scale"] = float(scale)
    tensors = {"q": q, "k": k, "v": v}
    if mask is not None:
        tensors["mask"] = mask
    tensors.update({"y": y, "gy": gy, "gq": gq, "gk": gk, "gv": gv})
    if float_mask:
        tensors["gmask"] = grads[3]
    w.case("scaled_dot_product_attention", label, attrs, tensors)


def attention_cases():
    torch.manual_seed(17)
    w = Writer("attention", "torch.nn.functional.scaled_dot_product_attention "
                            "(src/ops/coverage_attention_test.cpp).")
    m = torch.rand(3, 5) > 0.4
    m[1] = False  # a query that sees no key: zeros, no gradient
    attention_case(w, "bool_mask_with_a_fully_masked_row", f32(1, 2, 3, 4), f32(1, 2, 5, 4),
                   f32(1, 2, 5, 6), mask=m)
    mf = f32(2, 1, 3, 5)
    mf[0, 0, 2, :] = -math.inf
    mf[1, 0, 0, 1] = -math.inf
    attention_case(w, "float_mask_broadcast_over_heads_scale", f32(2, 3, 3, 4), f32(2, 3, 5, 4),
                   f32(2, 3, 5, 2), mask=mf, scale=0.5)
    attention_case(w, "is_causal_top_left", f32(1, 2, 4, 3), f32(1, 2, 6, 3), f32(1, 2, 6, 3),
                   is_causal=True)
    attention_case(w, "causal_bottom_right_more_queries_than_keys", f32(1, 1, 5, 3),
                   f32(1, 1, 3, 3), f32(1, 1, 3, 4), lower_right=True)
    attention_case(w, "grouped_query_causal", f32(2, 4, 3, 4), f32(2, 2, 5, 4), f32(2, 2, 5, 3),
                   is_causal=True, enable_gqa=True)
    attention_case(w, "unbatched", f32(3, 4), f32(5, 4), f32(5, 2))
    w.write()


def attention_and_conv_errors():
    q = torch.randn(1, 2, 3, 4)
    show("sdpa attn_mask and is_causal",
         lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 3, dtype=torch.bool),
                                                is_causal=True))
    show("sdpa 3 q heads, 2 kv heads, enable_gqa",
         lambda: F.scaled_dot_product_attention(torch.randn(1, 3, 2, 4), torch.randn(1, 2, 2, 4),
                                                torch.randn(1, 2, 2, 4), enable_gqa=True))
    show("conv3d window larger than the padded input",
         lambda: F.conv3d(torch.randn(1, 1, 2, 4, 4), torch.randn(1, 1, 3, 3, 3)))
    show("conv_transpose2d output_padding 2, stride 2",
         lambda: F.conv_transpose2d(torch.randn(1, 1, 3, 3), torch.randn(1, 1, 3, 3), stride=2,
                                    output_padding=2))


if __name__ == "__main__":
    pool_cases()
    pool_errors()
    conv_cases()
    attention_cases()
    attention_and_conv_errors()
