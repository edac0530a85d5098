#!/usr/bin/env python3
"""Prints what PyTorch returns or raises for the edge cases src/ops/coverage_edge_test.cpp
checks tessel against (issue 13): ids out of range, windows larger than the padded input, a
negative layer_norm eps, integer matmul, tensors with a 0-sized dimension, 5-d views.

    /opt/torchenv/bin/python tools/pytorch/edge_cases.py     # needs torch (CPU)

and the element-wise math edge cases of src/ops/coverage_math_test.cpp (NaN, infinities, ties,
bounds, zero bases; gradients as `(values, [d sum / d input, ...])`).

Each line is `case -> (shape, first values)` or `case -> ERROR <type> <message>`. The test's
expectations are closed forms (0, NaN, zeros, the bias, the input) that these lines confirm;
nothing here is read by the build.
"""
import torch
import torch.nn.functional as F


def show(name, f):
    try:
        r = f()
        out = (tuple(r.shape), r.flatten()[:6].tolist()) if torch.is_tensor(r) else r
        print(f"{name} -> {out}")
    except Exception as e:  # noqa: BLE001 - the error is the answer
        print(f"{name} -> ERROR {type(e).__name__} {str(e).splitlines()[0][:150]}")


def main():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    for bad in [5, -1, 10**6, 2**40]:
        show(f"cross_entropy target {bad}", lambda: F.cross_entropy(x, torch.tensor([0, 1, bad, 2])))
    show("cross_entropy ignore -100", lambda: F.cross_entropy(x, torch.tensor([0, 1, -100, 2])))
    show("cross_entropy C=0", lambda: F.cross_entropy(torch.randn(2, 0), torch.zeros(2, dtype=torch.long)))
    show("embedding id 9 of 2", lambda: F.embedding(torch.tensor([0, 9]), torch.randn(2, 3)))
    show("max_pool2d 3x3 on 2x2", lambda: F.max_pool2d(torch.randn(1, 1, 2, 2), 3))
    show("avg_pool2d 3x3 on 2x2", lambda: F.avg_pool2d(torch.randn(1, 1, 2, 2), 3))
    show("conv2d 3x3 on 2x2", lambda: F.conv2d(torch.randn(1, 1, 2, 2), torch.randn(1, 1, 3, 3)))
    show("conv2d 2x2 dilation 3 on 3x3",
         lambda: F.conv2d(torch.randn(1, 1, 3, 3), torch.randn(1, 1, 2, 2), dilation=3))
    show("max_pool2d 3x3 pad 1 on 1x1", lambda: F.max_pool2d(torch.ones(1, 1, 1, 1) * 2, 3, 1, 1))
    show("avg_pool2d 3x3 pad 1 on 1x1", lambda: F.avg_pool2d(torch.ones(1, 1, 1, 1) * 2, 3, 1, 1))
    show("layer_norm eps -1", lambda: F.layer_norm(torch.arange(6.0).view(2, 3), (3,), eps=-1.0))
    show("matmul i64", lambda: torch.arange(6).view(2, 3) @ torch.arange(6).view(3, 2))
    e = torch.randn(0, 3)
    show("add [0,3] + [3]", lambda: e + torch.randn(3))
    show("relu [0,3]", lambda: torch.relu(e))
    show("softmax [0,3]", lambda: torch.softmax(e, -1))
    show("sum [0,3] dim 0", lambda: e.sum(0))
    show("sum [0,3]", lambda: e.sum())
    show("mean [0,3] dim 0", lambda: e.mean(0))
    show("mean [0,3]", lambda: e.mean())
    show("amax [0,3] dim 0", lambda: e.amax(0))
    show("amax [0,3]", lambda: e.amax())
    show("amax [0,3] dim 1", lambda: e.amax(1))
    show("matmul [2,0] @ [0,3]", lambda: torch.randn(2, 0) @ torch.randn(0, 3))
    show("linear K=0", lambda: F.linear(torch.randn(2, 0), torch.randn(3, 0), torch.tensor([1.0, 2, 3])))
    show("conv2d N=0", lambda: F.conv2d(torch.randn(0, 1, 4, 4), torch.randn(2, 1, 3, 3), torch.randn(2)))
    show("max_pool2d N=0", lambda: F.max_pool2d(torch.randn(0, 1, 4, 4), 2))
    show("cat [2,0], [2,3] dim 1", lambda: torch.cat([torch.randn(2, 0), torch.arange(6.0).view(2, 3)], 1))
    show("cross_entropy no targets, mean",
         lambda: F.cross_entropy(torch.randn(0, 5), torch.zeros(0, dtype=torch.long)))
    show("cross_entropy no targets, sum",
         lambda: F.cross_entropy(torch.randn(0, 5), torch.zeros(0, dtype=torch.long), reduction="sum"))
    show("embedding of no ids", lambda: F.embedding(torch.zeros(0, dtype=torch.long), torch.randn(2, 3)))
    a = torch.randn(0, 3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    (a + b).sum().backward()
    print(f"grad of b in (empty [0,3] + b).sum() -> {b.grad.tolist()}")
    show("5-d expand().contiguous()",
         lambda: torch.arange(24.0).view(2, 1, 3, 1, 4).expand(2, 5, 3, 6, 4).contiguous())
    math_cases()
    index_cases()
    cross_entropy_cases()
    norm_cases()


def grads(f, *values):
    """f's output and the gradients of its sum with respect to each input."""
    xs = [torch.tensor(v, requires_grad=True) for v in values]
    y = f(*xs)
    y.sum().backward()
    return y.tolist(), [x.grad.tolist() for x in xs]


def math_cases():
    """src/ops/coverage_math_test.cpp."""
    nan, inf = float("nan"), float("inf")
    print("maximum", grads(torch.maximum, [1.0, nan, 2, 3], [nan, 1.0, 2, 1]))
    print("minimum", grads(torch.minimum, [1.0, nan, 2, 3], [nan, 1.0, 2, 1]))
    x = torch.tensor([0.0, -1, inf, -inf, nan])
    for f in [torch.exp, torch.log, torch.sqrt, torch.abs, torch.neg, torch.erf]:
        print(f.__name__, f(x).tolist())
    print("abs'", grads(torch.abs, [-1.0, 0, 2]))
    print("sqrt'", grads(torch.sqrt, [0.0, 4]))
    print("erf'", grads(torch.erf, [-1.0, 0, 2]))
    print("pow", torch.pow(torch.tensor([0.0, 0, 2, -2, -2]), torch.tensor([2.0, 0, 3, 2, 0.5])).tolist())
    print("pow'", grads(torch.pow, [0.0, 0, 2], [2.0, 0, 3]))
    c = [nan, -3, 0.5, 3, -0.5, 1]
    print("clamp(-0.5, 1)", grads(lambda t: torch.clamp(t, -0.5, 1.0), c))
    print("clamp(2, 1)", torch.clamp(torch.tensor(c), 2.0, 1.0).tolist())
    print("clamp(max=0)", torch.clamp(torch.tensor(c), max=0.0).tolist())
    print("clamp(min=-0.5)'", grads(lambda t: torch.clamp(t, min=-0.5), c))
    a, b = torch.tensor([nan, 1, 2, -inf]), torch.tensor([nan, 1, 1, -inf])
    for op in ["eq", "ne", "lt", "le", "gt", "ge"]:
        print(op, getattr(torch, op)(a, b).tolist())
    cond = torch.tensor([[True], [False]])
    print("where", grads(lambda p, q: torch.where(cond, p, q), [1.0, 2, 3], [[-1.0, -2, -3], [-4.0, -5, -6]]))
    show("where with an i64 condition",
         lambda: torch.where(torch.tensor([[1], [0]]), torch.ones(3), torch.zeros(2, 3)))


def index_cases():
    """src/ops/coverage_index_test.cpp: negative ids written as id + N for PyTorch."""
    x = torch.arange(12.0).view(4, 3)
    show("index_select(0, [3, 0])", lambda: x.index_select(0, torch.tensor([3, 0])))
    show("index_select(0, [-1]) (PyTorch raises; ONNX Gather counts from the end)",
         lambda: x.index_select(0, torch.tensor([-1])))
    show("index_select(0, [4])", lambda: x.index_select(0, torch.tensor([4])))
    show("gather(0, [[3, 0, 1]])", lambda: torch.gather(x, 0, torch.tensor([[3, 0, 1]])))
    show("gather(0, [[4, 0, 1]])", lambda: torch.gather(x, 0, torch.tensor([[4, 0, 1]])))
    show("scatter_add(0, [[3, 0, 1]], ones)",
         lambda: torch.zeros(4, 3).scatter_add(0, torch.tensor([[3, 0, 1]]), torch.ones(1, 3)))
    xs = x.clone().requires_grad_()
    y = xs.index_select(0, torch.tensor([1, 1, 3]))
    y.backward(torch.tensor([[1.0], [2.0], [4.0]]).expand(3, 3))
    print(f"index_select(0, [1, 1, 3]) gradient -> {xs.grad.tolist()}")
    xs.grad = None
    y = torch.gather(xs, 0, torch.tensor([[3, 0], [2, 3]]))  # an index narrower than x
    y.backward(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    print(f"gather(0, [[3, 0], [2, 3]]) -> {y.tolist()}, gradient {xs.grad.tolist()}")
    show("zeros(4, 3).scatter_add(1, [[2, 2], [0, 1]], arange(12).view(3, 4)) (src past index)",
         lambda: torch.zeros(4, 3).scatter_add(1, torch.tensor([[2, 2], [0, 1]]),
                                               torch.arange(12.0).view(3, 4)))
    src = torch.arange(12.0).view(3, 4).requires_grad_()
    show("... its src gradient (PyTorch 2.15 fails: a gradient of index's shape)",
         lambda: torch.autograd.grad(torch.zeros(4, 3).scatter_add(
             1, torch.tensor([[2, 2], [0, 1]]), src).sum(), src)[0])
    print("scatter_add(1, [[0, 0, 2], [1, 1, 1]], arange) and its gradients",
          grads(lambda z, s: z.scatter_add(1, torch.tensor([[0, 0, 2], [1, 1, 1]]), s),
                [[0.0] * 3] * 2, [[0.0, 1, 2], [3, 4, 5]]))


def cross_entropy_cases():
    """src/ops/coverage_ce_test.cpp: class weights, label smoothing, reduction, probabilities.
    Computed in float64 from the test's float32 logits."""
    x = torch.tensor([-1.0, -0.63, -0.26, 0.11, 0.48, 0.85, -0.78, -0.41, -0.04, 0.33, 0.70, -0.93],
                     dtype=torch.float32).double().view(3, 4).requires_grad_()
    t = torch.tensor([2, -100, 0])
    w = torch.tensor([0.5, 2.0, 1.0, 3.0], dtype=torch.float64)
    for reduction in ["mean", "sum", "none"]:
        loss = F.cross_entropy(x, t, weight=w, label_smoothing=0.1, reduction=reduction)
        print(f"cross_entropy ids {reduction}:", [f"{v:.6f}" for v in loss.flatten().tolist()])
    F.cross_entropy(x, t, weight=w, label_smoothing=0.1).backward()
    print("  gradient:", [f"{v:.6f}" for v in x.grad.flatten().tolist()])
    p = torch.tensor([[0.2, 0.3, 0.5, 0.0], [1.0, 0, 0, 0], [0.25, 0.25, 0.25, 0.25]],
                     dtype=torch.float64)
    x.grad = None
    p.requires_grad_()
    loss = F.cross_entropy(x, p, weight=w, label_smoothing=0.1)
    loss.backward()
    print(f"cross_entropy probabilities mean: {loss.item():.6f}")
    print("  gradient:", [f"{v:.6f}" for v in x.grad.flatten().tolist()])
    print("  target gradient:", [f"{v:.6f}" for v in p.grad.flatten().tolist()])
    p.grad = None
    g = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    (F.cross_entropy(x, p, reduction="none") * g).sum().backward()
    print("  target gradient, none, upstream [1, -2, 0.5]:",
          [f"{v:.6f}" for v in p.grad.flatten().tolist()])
    print("cross_entropy probabilities none:",
          [f"{v:.6f}" for v in F.cross_entropy(x, p, reduction="none").tolist()])


def norm_cases():
    """src/ops/coverage_norm_test.cpp: rms_norm with PyTorch's default eps (a zero row stays
    zero), group_norm in 2 groups; float64 from the test's float32 values."""
    x = torch.tensor([0.0, 0, 0, 1, -2, 3], dtype=torch.float32).double().view(2, 3).requires_grad_()
    w = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64).requires_grad_()
    y = F.rms_norm(x, (3,), w, eps=torch.finfo(torch.float32).eps)  # the f32 default
    print("rms_norm:", [f"{v:.6f}" for v in y.flatten().tolist()])
    y.backward(torch.tensor([[1.0, 1, 1], [1.0, -1, 2]], dtype=torch.float64))
    print("  dx:", [f"{v:.6f}" for v in x.grad.flatten().tolist()])
    print("  dweight:", [f"{v:.6f}" for v in w.grad.tolist()])
    g = torch.tensor([0.1 * i - 0.7 for i in range(16)], dtype=torch.float32).double()
    g = g.view(2, 4, 2).requires_grad_()
    gw = torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=torch.float64).requires_grad_()
    gb = torch.tensor([0.0, 0.5, -0.5, 1.0], dtype=torch.float64).requires_grad_()
    y = F.group_norm(g, 2, gw, gb)
    print("group_norm:", [f"{v:.6f}" for v in y.flatten().tolist()])
    y.backward(torch.tensor([(i % 5) - 2.0 for i in range(16)], dtype=torch.float64).view(2, 4, 2))
    print("  dx:", [f"{v:.6f}" for v in g.grad.flatten().tolist()])
    print("  dweight:", [f"{v:.6f}" for v in gw.grad.tolist()])
    print("  dbias:", [f"{v:.6f}" for v in gb.grad.tolist()])
    _, mean, rstd = torch.native_layer_norm(x.detach(), (3,), None, None, 1e-5)
    print("native_layer_norm mean, rstd:", [f"{v:.6f}" for v in mean.flatten().tolist()],
          [f"{v:.6f}" for v in rstd.flatten().tolist()])
    print("adaptive_avg_pool2d(1):",
          [f"{v:.6f}" for v in F.adaptive_avg_pool2d(g.detach().view(2, 2, 2, 2), 1).flatten().tolist()])


if __name__ == "__main__":
    main()
