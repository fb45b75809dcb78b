"""Cases shared by the CUDA splinc / resize kernel tests (tests/cuda/gpu/test_lines.py on a GPU,
tests/cuda/emu/test_lines.py with the host emulation of the kernels): sweeps over orders 0-7,
all bounds, 1-3 dims and sizes including 1 and 2, compared with the compiled CPU kernels.
Every function takes K (the torch.ops namespace under test), C (torch.ops.nitorch_jit with the
CPU kernels) and the device of K's tensors, and returns a list of failure messages.
The contract is docs/splinc-resize-spec.md.
"""
import torch

from nitorch_jit.ops.resize import anchor_map

F32, F64 = torch.float32, torch.float64
ORDERS = range(8)
BOUNDS = range(7)  # replicate, dct1, dct2, dst1, dst2, dft, zero

# spatial shapes of the splinc sweep (a batch dim of 2 in front)
SPLINC_SHAPES = {
    1: [(1,), (2,), (7,), (16,)],
    2: [(1, 5), (2, 3), (6, 9)],
    3: [(1, 2, 3), (4, 5, 3), (3, 1, 6)],
}

# resize cases: per spatial dim (input size n, output size m, anchor); up, down, identity
# ((6, 6, 'c'), (7, 7, 'l'), (1, 1, 'e') are skipped passes for orders 0-1 without filter)
RESIZE_CASES = {
    1: [[(1, 4, "c")], [(2, 5, "e")], [(7, 3, "c")], [(8, 16, "f")], [(9, 4, "l")],
        [(5, 1, "e")], [(3, 3, "e")]],
    2: [[(5, 9, "c"), (6, 3, "e")], [(1, 3, "f"), (7, 7, "l")], [(4, 4, "c"), (3, 7, "e")]],
    3: [[(5, 3, "e"), (2, 5, "c"), (6, 6, "c")], [(3, 7, "l"), (4, 2, "f"), (1, 1, "e")]],
}


def randn(*shape, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=F64)


def close(got, want, tol):
    """None when `got` (any device) matches `want` to tol relative to max(1, max|want|)."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if got.numel() == 0:
        return None
    g, w = got.detach().cpu().double(), want.detach().cpu().double()
    if not torch.isfinite(g).all():
        return "non-finite values"
    scale = max(1.0, w.abs().max().item())
    err = (g - w).abs().max().item()
    return None if err <= tol * scale else f"max error {err:.3g} (scale {scale:.3g})"


def mixed(first, D, step, mod):
    """Per-dim codes: first, first + step, ... (mod `mod`), so every dim sees every code."""
    return [(first + step * k) % mod for k in range(D)]


def splinc_sweep(K, C, device, D, dtype, tol):
    fails = []
    for s, shape in enumerate(SPLINC_SHAPES[D]):
        x = randn(2, *shape, seed=10 * D + s).to(dtype)
        xd = x.to(device)
        dims = list(range(1, D + 1))
        for order in ORDERS:
            for bound in BOUNDS:
                orders, bounds = mixed(order, D, 3, 8), mixed(bound, D, 2, 7)
                for adj in (False, True):
                    want = C.spline_coeff_nd(x, orders, bounds, dims, adj)
                    got = K.spline_coeff_nd(xd, orders, bounds, dims, adj)
                    msg = close(got, want, tol)
                    if msg:
                        fails.append(f"shape={shape} order={orders} bound={bounds} "
                                     f"adjoint={adj}: {msg}")
    return fails


def resize_params(case):
    """(nin, nout, scale, shift) of a RESIZE_CASES entry."""
    nin = [n for n, _, _ in case]
    nout = [m for _, m, _ in case]
    aff = [anchor_map(a, n, m) for n, m, a in case]
    return nin, nout, [a[0] for a in aff], [a[1] for a in aff]


def resize_sweep(K, C, device, D, dtype, tol, prefilter, orders_=ORDERS):
    fails = []
    for c, case in enumerate(RESIZE_CASES[D]):
        nin, nout, scale, shift = resize_params(case)
        x = randn(2, 3, *nin, seed=100 + c).to(dtype)
        y = randn(2, 3, *nout, seed=200 + c).to(dtype)
        xd, yd = x.to(device), y.to(device)
        for order in orders_:
            for bound in BOUNDS:
                orders, bounds = mixed(order, D, 2, 8), mixed(bound, D, 3, 7)
                args = (scale, shift, orders, bounds, prefilter)
                for name, a, ad, shape in (("resize", x, xd, nout),
                                           ("resize_adjoint", y, yd, nin)):
                    want = getattr(C, name)(a, shape, *args)
                    got = getattr(K, name)(ad, shape, *args)
                    msg = close(got, want, tol)
                    if msg:
                        fails.append(f"{name} case={case} order={orders} bound={bounds} "
                                     f"prefilter={prefilter}: {msg}")
    return fails


def layout_inputs(seed=5):
    """Non-contiguous views of a float64 tensor [3, 2, 9, 8, 7]-ish: (name, tensor) pairs."""
    base = randn(3, 10, 9, 16, seed=seed)
    return [
        ("permuted", base.permute(0, 3, 1, 2)),                    # [3, 16, 10, 9]
        ("sliced", base[:, ::2, :, 1:12:2].transpose(1, 3)),      # [3, 6, 9, 5]
        ("expanded", randn(1, 10, 9, 7, seed=seed + 1).expand(3, -1, -1, -1)),
        ("offset", base[1:, 1:, 2:, 3:]),                          # storage offset
    ]


def layout_sweep(K, C, device):
    fails = []
    for name, x in layout_inputs():
        xd = x.to(device)
        if device != "cpu" and name == "expanded":  # keep the layout on the device too
            xd = x[:1].to(device).expand(x.shape)
        elif device != "cpu":
            xd = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=device)
            xd.copy_(x)
        for orders, bounds in (([3, 2, 5], [2, 1, 5]), ([7, 0, 4], [6, 3, 0])):
            dims = [1, 2, 3]
            for adj in (False, True):
                got = K.spline_coeff_nd(xd, orders, bounds, dims, adj)
                want = C.spline_coeff_nd(x, orders, bounds, dims, adj)
                msg = close(got, want, 1e-10)
                if msg or not got.is_contiguous():
                    fails.append(f"spline_coeff_nd {name} {orders}: {msg or 'not contiguous'}")
            shape = [x.shape[-2] + 3, max(1, x.shape[-1] - 2)]
            aff = [anchor_map("e", x.shape[-2], shape[0]), anchor_map("c", x.shape[-1], shape[1])]
            args = ([a[0] for a in aff], [a[1] for a in aff], orders[:2], bounds[:2], True)
            got = K.resize(xd, shape, *args)
            want = C.resize(x, shape, *args)
            msg = close(got, want, 1e-10)
            if msg or not got.is_contiguous():
                fails.append(f"resize {name} {orders}: {msg or 'not contiguous'}")
            got = K.resize_adjoint(xd, shape, *args)
            want = C.resize_adjoint(x, shape, *args)
            msg = close(got, want, 1e-10)
            if msg:
                fails.append(f"resize_adjoint {name} {orders}: {msg}")
    return fails


def inplace_sweep(K, C, device):
    """spline_coeff_nd_ on contiguous and non-contiguous tensors; the input keeps its strides
    and the result equals the CPU op's."""
    fails = []
    for name, x in layout_inputs():
        if name == "expanded":
            continue
        for orders, bounds, adj in (([3, 2, 5], [2, 1, 5], False), ([7, 4, 6], [5, 3, 0], True),
                                    ([0, 1, 1], [2, 2, 2], False)):
            want = x.clone()
            C.spline_coeff_nd_(want, orders, bounds, [1, 2, 3], adj)
            xd = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=device)
            xd.copy_(x)
            ptr, strides = xd.data_ptr(), xd.stride()
            K.spline_coeff_nd_(xd, orders, bounds, [1, 2, 3], adj)
            msg = close(xd, want, 1e-10)
            if msg or xd.data_ptr() != ptr or xd.stride() != strides:
                fails.append(f"spline_coeff_nd_ {name} {orders} adjoint={adj}: "
                             f"{msg or 'storage changed'}")
    # contiguous, and filtering a middle dim only / dims out of order
    x = randn(4, 6, 5, seed=9)
    for dims in ([1], [2, 0], [0, 1, 2]):
        n = len(dims)
        want = x.clone()
        C.spline_coeff_nd_(want, [3, 5, 2][:n], [1, 5, 4][:n], dims, False)
        xd = x.to(device)
        K.spline_coeff_nd_(xd, [3, 5, 2][:n], [1, 5, 4][:n], dims, False)
        msg = close(xd, want, 1e-10)
        if msg:
            fails.append(f"spline_coeff_nd_ dims={dims}: {msg}")
        got = K.spline_coeff_nd(x.to(device), [3, 5, 2][:n], [1, 5, 4][:n], dims, True)
        msg = close(got, C.spline_coeff_nd(x, [3, 5, 2][:n], [1, 5, 4][:n], dims, True), 1e-10)
        if msg:
            fails.append(f"spline_coeff_nd dims={dims}: {msg}")
    return fails


def bad_calls(x):
    """(op name, args) that the CPU ops reject; x: a float64 [2, 5, 4] tensor."""
    sc, sh = [1.0, 1.0], [0.0, 0.0]
    return [
        ("spline_coeff_nd", (x.int(), [3], [2], [1], False)),
        ("spline_coeff_nd", (x.half(), [3], [2], [1], False)),
        ("spline_coeff_nd", (x, [3, 3], [2], [1], False)),
        ("spline_coeff_nd", (x, [3], [2], [3], False)),
        ("spline_coeff_nd", (x, [3], [2], [-1], False)),
        ("spline_coeff_nd", (x, [8], [2], [1], False)),
        ("spline_coeff_nd", (x, [-1], [2], [1], False)),
        ("spline_coeff_nd", (x, [3], [7], [1], False)),
        ("spline_coeff_nd", (x, [3], [-2], [1], False)),
        ("spline_coeff_nd_", (x, [3], [2], [5], False)),
        ("spline_coeff_nd_", (x[:1].expand(3, 5, 4), [3], [2], [1], False)),
        ("resize", (x.int(), [3, 3], sc, sh, [1, 1], [2, 2], True)),
        ("resize", (x, [3, 3, 3, 3], [1.0] * 4, [0.0] * 4, [1] * 4, [2] * 4, True)),
        ("resize", (x, [], [], [], [], [], True)),
        ("resize", (x, [3, 3], [1.0], sh, [1, 1], [2, 2], True)),
        ("resize", (x, [3, 0], sc, sh, [1, 1], [2, 2], True)),
        ("resize", (x, [3, 3], sc, sh, [1, 8], [2, 2], True)),
        ("resize", (x, [3, 3], sc, sh, [1, 1], [2, 7], True)),
        ("resize", (x, [3, 3], [float("nan"), 1.0], sh, [1, 1], [2, 2], True)),
        ("resize_adjoint", (x, [3, 3], sc, [0.0, float("inf")], [1, 1], [2, 2], True)),
        ("resize_adjoint", (x[:, :0], [3, 3], sc, sh, [1, 1], [2, 2], True)),
        # the dtype names (c10's), each op's own name, the other lengths and signs, int32 sizes
        ("spline_coeff_nd", (x.bool(), [3], [2], [1], False)),
        ("spline_coeff_nd", (x, [3], [2], [1, 2], False)),
        ("spline_coeff_nd_", (x.float().to(torch.bfloat16), [3], [2], [1], False)),
        ("spline_coeff_nd_", (x, [3], [9], [1], False)),
        ("resize_adjoint", (x.long(), [3, 3], sc, sh, [1, 1], [2, 2], True)),
        ("resize_adjoint", (x, [3, 3], sc, sh, [1, 1], [2], True)),
        ("resize", (x, [-2, 3], sc, sh, [1, 1], [2, 2], True)),
        ("resize_adjoint", (x, [3, 3], sc, sh, [1, -1], [2, 2], True)),
        ("resize", (x, [3, 3], sc, sh, [1, 1], [-1, 2], True)),
        ("resize", (x, [3, 3], sc, [float("-inf"), 0.0], [1, 1], [2, 2], True)),
        ("resize", (x, [3, 2 ** 31 - 1], sc, sh, [1, 1], [2, 2], True)),
        ("resize_adjoint", (x, [2 ** 31, 3], sc, sh, [1, 1], [2, 2], True)),
    ]


def first_line(err):
    return str(err).splitlines()[0]


def _raised(fn, args):
    """'RuntimeError: <first line>' of what fn(*args) raises, another type's name, or None."""
    try:
        fn(*args)
    except RuntimeError as e:
        return f"RuntimeError: {first_line(e)}"
    except Exception as e:  # noqa: BLE001 -- reported as a failure
        return f"{type(e).__name__} (not RuntimeError): {first_line(e)}"
    return None


def bad_call_sweep(K, C, names):
    """Every bad call of the ops `names`: K (a mapping or namespace of ops: any device, CPU
    tensors in) raises RuntimeError with C's first line, and leaves its tensors unchanged."""
    fails = []
    x = randn(2, 5, 4)
    get = K.__getitem__ if isinstance(K, dict) else lambda n: getattr(K, n)
    for i, (name, args) in enumerate(bad_calls(x)):
        if name not in names:
            continue
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        want = _raised(getattr(C, name), args)
        got = _raised(get(name), args)
        if want is None or not want.startswith("RuntimeError") or got != want:
            fails.append(f"bad call {i} ({name}): C {want!r}, got {got!r}")
        for a, b in zip(args, before):
            if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                fails.append(f"bad call {i} ({name}): an input changed")
    return fails
