"""The data the pushpull tests share (the CPU kernels, the twin, the CUDA kernels and their
host emulation): random voxel coordinates away from the spline knots, and the list of raw-op calls
with bad arguments that the compiled kernels and the twin must refuse with the same message."""
import torch

F64 = torch.float64


def rand_coords(shape_out, shape_in, margin=2.5, dtype=F64, seed=0, batch=1):
    """Voxel coordinates [batch, *shape_out, D] in [-margin, n-1+margin], away from integers
    and half-integers (the knots of odd resp. even spline orders), so that float32 rounding
    cannot change the taps."""
    gen = torch.Generator().manual_seed(seed)
    D = len(shape_in)
    size = [batch, *shape_out, D]
    lo = torch.tensor([-margin] * D, dtype=F64)
    hi = torch.tensor([n - 1 + margin for n in shape_in], dtype=F64)
    base = torch.floor(lo + torch.rand(size, generator=gen, dtype=F64) * (hi - lo))
    frac = 0.03 + 0.44 * torch.rand(size, generator=gen, dtype=F64)
    frac = frac + 0.5 * (torch.rand(size, generator=gen, dtype=F64) < 0.5)
    return (base + frac).to(dtype)


def _randn(*shape, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=F64)


def bad_args():
    """The tensors bad_calls builds on: input x [1, 2, 4, 5], grid g [1, 3, 2, 2] (D = 2) and a
    weight w [1, 2, 3, 2] at the points of g."""
    return _randn(1, 2, 4, 5), rand_coords([3, 2], [4, 5]), _randn(1, 2, 3, 2, seed=2)


def bad_calls(ns, x, g, w):
    """Raw-op calls with bad arguments, as (thunk, word of the message): ``ns`` is
    torch.ops.nitorch_jit (the compiled kernels) or a namespace of the twin's functions by op
    name (nitorch_jit.torch_impl.pushpull). Every call raises RuntimeError (csrc/pushpull/checks.h)
    and changes none of x, g, w (from bad_args)."""
    o, b = [1, 1], [0, 0]
    r = _randn
    A = torch.tensor([[[1.0, 0.0, 0.5], [0.0, 1.0, -0.5]]], dtype=F64)  # [1, 2, 3]
    return [
        # the grid
        (lambda: ns.grid_pull(x, g[..., :1].expand(1, 3, 2, 4), o, b, True), "D"),
        (lambda: ns.grid_pull(x, g[0], o, b, True), "grid"),
        (lambda: ns.grid_pull(x, g[0, 0], o, b, True), "grid must have shape"),
        (lambda: ns.grid_pull(x, r(1, 3, 2, 0), o, b, True), "D"),
        (lambda: ns.grid_pull(x, r(1, 3, 2, 4), o, b, True), "D"),
        (lambda: ns.grid_pull(x, r(1, 3, 2, 1, 1, 4), o, b, True), "D"),
        (lambda: ns.grid_pull(x, g.long(), o, b, True), "grid"),
        (lambda: ns.grid_pull(x, g.half(), o, b, True), "grid must be float32"),
        (lambda: ns.grid_grad(x, g.to(torch.bfloat16), o, b, True), "grid must be float32"),
        (lambda: ns.grid_push(w, g.int(), [4, 5], o, b, True), "grid"),
        # the input
        (lambda: ns.grid_pull(x[0], g, o, b, True), "input"),
        (lambda: ns.grid_grad(x[..., None], g, o, b, True), "input"),
        (lambda: ns.grid_pull(x.float(), g, o, b, True), "dtype"),
        (lambda: ns.grid_pull(x.long(), g, o, b, True), "dtype"),
        (lambda: ns.grid_pull(x, g.float(), o, b, True), "dtype"),
        (lambda: ns.grid_pull(r(2, 2, 4, 5), g, o, b, True), "batch"),
        (lambda: ns.grid_grad(r(2, 2, 4, 5), g, o, b, True), "batch"),
        # order and bound
        (lambda: ns.grid_pull(x, g, [1, 8], b, True), "order[1]"),
        (lambda: ns.grid_pull(x, g, [-1, 1], b, True), "order[0]"),
        (lambda: ns.grid_pull(x, g, o, [0, 7], True), "bound[1]"),
        (lambda: ns.grid_grad(x, g, o, [-1, 0], True), "bound[0]"),
        (lambda: ns.grid_pull(x, g, [1], b, True), "order"),
        (lambda: ns.grid_pull(x, g, o, [1, 1, 1], True), "bound"),
        (lambda: ns.grid_grad(x, g, [1, 1, 1], [1, 1, 1], True), "order"),
        # the scatters
        (lambda: ns.grid_push(w, g, [4], o, b, True), "shape"),
        (lambda: ns.grid_push(w, g, [4, -1], o, b, True), "shape[1]"),
        (lambda: ns.grid_push(r(1, 2, 3, 3), g, [4, 5], o, b, True), "spatial shape"),
        (lambda: ns.grid_push(w[0], g, [4, 5], o, b, True), "input"),
        (lambda: ns.grid_push(w.float(), g, [4, 5], o, b, True), "dtype"),
        (lambda: ns.grid_push(w.expand(2, 2, 3, 2), g, [4, 5], o, b, True), "batch"),
        (lambda: ns.grid_push(w, g, [4, 5], [1, 9], b, True), "order[1]"),
        (lambda: ns.grid_push(r(1, 2, 3, 3), g, [4], [9, 9], b, True), "spatial shape"),
        (lambda: ns.grid_push(w, g, [4], [9, 9], b, True), "order[0]"),
        (lambda: ns.grid_pushgrad(w, g, [4, 5], o, b, True), "input"),
        (lambda: ns.grid_pushgrad(r(1, 2, 3, 2, 3), g, [4, 5], o, b, True), "size(-1)"),
        (lambda: ns.grid_pushgrad(r(1, 2, 3, 3, 2), g, [4, 5], o, b, True), "spatial shape"),
        (lambda: ns.grid_pushgrad(r(1, 2, 3, 2, 2), g, [4, 5, 6], o, b, True), "shape"),
        # the dot ops: the input and options first, then the weight
        (lambda: ns.grid_grad_dot(r(1, 3, 3, 2), x, g, o, b, True), "channels"),
        (lambda: ns.grid_grad_dot(r(1, 2, 3, 3), x, g, o, b, True), "weight"),
        (lambda: ns.grid_grad_dot(r(1, 2, 3), x, g, o, b, True), "weight"),
        (lambda: ns.grid_grad_dot(w.float(), x, g, o, b, True), "dtype"),
        (lambda: ns.grid_grad_dot(w.expand(2, 2, 3, 2), x, g, o, b, True), "batch"),
        (lambda: ns.grid_grad_dot(r(1, 3, 3, 3), x[0], g, o, b, True), "input"),
        (lambda: ns.grid_grad_dot(r(1, 3, 3, 3), x, g, [1, 8], b, True), "order[1]"),
        (lambda: ns.grid_hess_dot(w, x, g, o, b, True), "weight"),
        (lambda: ns.grid_hess_dot(r(1, 2, 3, 2, 3), x, g, o, b, True), "size(-1)"),
        (lambda: ns.grid_hess_dot(r(1, 2, 3, 1, 2), x, g, o, b, True), "spatial shape"),
        (lambda: ns.grid_hess_dot(r(1, 1, 3, 2, 2), x, g, o, b, True), "channels"),
        # the fused pull backward: the grad before the options
        (lambda: ns.grid_pull_backward(w[:, :1], x, g, o, b, True), "channels"),
        (lambda: ns.grid_pull_backward(w[..., :1], x, g, o, b, True), "spatial shape"),
        (lambda: ns.grid_pull_backward(w.float(), x, g, o, b, True), "dtype"),
        (lambda: ns.grid_pull_backward(w, r(2, 2, 4, 5), g, o, b, True), "batch"),
        (lambda: ns.grid_pull_backward(w, x, g, [1, 9], b, True), "order"),
        (lambda: ns.grid_pull_backward(w, x[0], g, o, b, True), "input"),
        (lambda: ns.grid_pull_backward(w[:, :1], x, g, [1, 9], b, True), "channels"),
        (lambda: ns.grid_pull_backward(w, x, g.half(), o, b, True), "grid"),
        # the affine ops
        (lambda: ns.affine_pull(x, torch.ones(1, 2, 2, dtype=F64), [4, 3], o, b, True),
         "affine must have shape"),
        (lambda: ns.affine_pull(x, torch.ones(1, 4, 5, dtype=F64), [4, 3], o, b, True),
         "affine must have shape"),
        (lambda: ns.affine_pull(x, A.long(), [4, 3], o, b, True), "affine must be float32"),
        (lambda: ns.affine_pull(x, A.expand(2, 2, 3), [4, 3], o, b, True), "batch size"),
        (lambda: ns.affine_pull(x, A.float(), [4, 3], o, b, True), "dtype"),
        (lambda: ns.affine_pull(x[0], A, [4, 3], o, b, True), "input"),
        (lambda: ns.affine_pull(x, A, [4, 3], [1, 8], b, True), "order[1]"),
        (lambda: ns.affine_pull(x, A, [4, 3], o, [0], True), "bound"),
        (lambda: ns.affine_pull(x, A, [4, -3], o, b, True), "shape[1]"),
        (lambda: ns.affine_push(x, A, [4], o, b, True), "shape must have D"),
        (lambda: ns.affine_push(x[..., None], A, [4, 3], o, b, True), "input"),
        (lambda: ns.affine_push(x.float(), A, [4, 3], o, b, True), "dtype"),
        (lambda: ns.affine_grad_dot(r(1, 3, 4, 3), x, A, o, b, True), "channels"),
        (lambda: ns.affine_grad_dot(r(1, 2, 4), x, A, o, b, True), "weight"),
        (lambda: ns.affine_grad_dot(r(1, 2, 4, 3).float(), x, A, o, b, True), "dtype"),
        (lambda: ns.affine_grad_dot(r(1, 3, 4, 3), x, A, [1, 9], b, True), "channels"),
        (lambda: ns.affine_grad_dot(r(1, 2, 4, 3), x, A, [1, 9], b, True), "order[1]"),
        (lambda: ns.affine_grad_dot(r(1, 2, 4, 3), x, A.half(), o, b, True), "affine"),
    ]


def first_line(e):
    return str(e).splitlines()[0]
