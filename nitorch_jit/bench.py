"""`nitorch-jit bench`: compile on first use, then time the C and TORCH kernels and grid_sample
on one synthetic 3-D volume, check they agree, and print a table. Also timing helpers shared by
the scripts under scripts/.
"""
import sys
import time

import torch


def timeit(fn, repeat=5, warmup=1):
    """Minimum wall time of fn() in milliseconds (CUDA synchronised)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def synthetic(size, dim=3, dtype=torch.float32, device="cpu", disp=2.0, channels=1, seed=0):
    """A smooth random volume [1, C, *size^dim] and a grid = identity + uniform(-disp, disp)."""
    from .ops.pushpull import identity_grid
    g = torch.Generator().manual_seed(seed)
    shape = [size] * dim
    img = torch.randn([1, channels] + shape, generator=g, dtype=dtype).to(device)
    grid = identity_grid(shape, dtype=dtype) + (torch.rand(shape + [dim], generator=g, dtype=dtype) * 2 - 1) * disp
    return img, grid.unsqueeze(0).to(device)


def voxel_to_grid_sample(grid, shape):
    """Voxel coordinates (tensor order) -> grid_sample's [-1, 1] coordinates (x = last dim)."""
    scale = torch.tensor([2.0 / (s - 1) for s in shape], dtype=grid.dtype, device=grid.device)
    return (grid * scale - 1).flip(-1)


def print_table(rows, headers):
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def run_bench(size=128, threads=None, repeat=5, modules=("pushpull",)):
    """Time the compiled kernels of `modules` against their pure-PyTorch twins and peers."""
    status = 0
    if "pushpull" in modules:
        status |= _bench_pushpull(size, threads, repeat)
    if "splinc" in modules or "resize" in modules:
        status |= _bench_resize(size, threads, repeat, modules)
    if "regsolve" in modules:
        status |= _bench_regsolve(size, threads, repeat)
    return status


def _bench_regsolve(size, threads, repeat):
    """regulariser_grid and solve_grid_fmg (issue workload), C against the TORCH twin run in
    this process on the same data (scripts/bench_solvers.py adds conv3d and PCG)."""
    from . import backends as backend
    from .ops import regularisers as R
    from .ops import solvers as S
    from .torch_impl import regsolve as twin
    if threads:
        torch.set_num_threads(threads)
    print(f"nitorch-jit bench: regularisers / FMG, {size}^3 x 3 float32 displacement grid, "
          f"membrane 1e-3, bending 0.1, lame (0.05, 0.2), full Hessian, "
          f"{torch.get_num_threads()} threads", flush=True)
    kw = dict(membrane=1e-3, bending=0.1, lame=(0.05, 0.2))
    g = torch.Generator().manual_seed(0)
    shape = [size] * 3
    v = torch.randn([1] + shape + [3], generator=g)
    h = torch.cat([torch.rand([1] + shape + [3], generator=g) + 0.01,
                   torch.zeros([1] + shape + [3])], -1)
    t0 = time.perf_counter()
    name = backend.ensure("regsolve", "cpu")
    R.regulariser_grid(v[:, :4, :4, :4], **kw)
    print(f"  regsolve CPU backend: {name} (ready in {time.perf_counter() - t0:.1f} s)",
          flush=True)
    p = S._grid_problem(h, v, None, 0, kw["membrane"], kw["bending"], kw["lame"], 1, 1, "dft")
    period = R.colour_periods(p.taps, p.shape, p.bound)

    def fmg(kernels):
        system = S.System(p.hessian, None, p.taps, period, True, kernels)
        return S.fmg(p, p.x, system, "cg", 2, 2)

    ours_reg = lambda: R.regulariser_grid(v, **kw)  # noqa: E731
    twin_reg = lambda: twin.reg_matvec(p.x, None, None, p.taps)  # noqa: E731
    err = float((ours_reg().movedim(-1, 1) - twin_reg()).abs().max())
    rows = []
    for label, ours, peer, n in [("regulariser_grid", ours_reg, twin_reg, repeat),
                                 ("solve_grid_fmg", lambda: fmg(None), lambda: fmg(twin),
                                  max(1, repeat // 2))]:
        tc, tt = timeit(ours, n), timeit(peer, n)
        rows.append((label, f"{tc:.1f} ms", f"{tt:.1f} ms", f"{tt / tc:.1f}x"))
    print_table(rows, ["routine", name, "TORCH", "speed-up"])
    print(f"  max |C - TORCH| of the operator: {err:.2e}")
    return 0


def _bench_resize(size, threads, repeat, modules):
    from . import backends as backend
    from .ops import resize as R
    from .ops import splinc as S
    from .torch_impl import resize as torch_rs
    from .torch_impl import splinc as torch_sc
    if threads:
        torch.set_num_threads(threads)
    print(f"nitorch-jit bench: prefilter / resize, {size}^3 float32 volume, "
          f"{torch.get_num_threads()} threads", flush=True)
    torch.manual_seed(0)
    x = torch.randn(1, 1, size, size, size)
    dct2 = [2] * 3  # bound code of dct2 (docs/pushpull-spec.md)
    n, m = size, 2 * size
    scale, shift = n / m, 0.5 * (n / m - 1)  # edge anchor, x2
    cases = []
    if "splinc" in modules:
        cases.append(("spline_coeff_nd cubic", "splinc",
                      lambda: S.spline_coeff_nd(x, 3, "dct2", dim=3),
                      lambda: torch_sc.spline_coeff_nd(x, [3] * 3, dct2, [2, 3, 4], False)))
    if "resize" in modules:
        cases.append((f"resize x2 cubic -> {m}^3", "resize",
                      lambda: R.resize(x, factor=2, anchor="e", interpolation=3),
                      lambda: torch_rs.resize(x, [m] * 3, [scale] * 3, [shift] * 3, [3] * 3,
                                              dct2, True)))
    rows = []
    for label, module, ours, twin in cases:
        try:
            backend.load_module(module, "cpu")
            t_c = timeit(ours, repeat)
            diff = f"C-TORCH {(ours() - twin()).abs().max().item():.1e}"
        except Exception as e:  # report, then time what can be timed
            print(f"C kernels of {module} unavailable: {e}", file=sys.stderr)
            t_c, diff = float("nan"), "-"
        t_t = timeit(twin, max(1, repeat // 2))
        rows.append((label, f"{t_c:.1f}", f"{t_t:.1f}", f"{t_t / t_c:.1f}x", diff))
    print_table(rows, ["op", "C ms", "TORCH ms", "C vs TORCH", "max abs diff"])
    return 0


def _bench_pushpull(size, threads, repeat):
    from . import backends as backend
    from .torch_impl import pushpull as torch_pp
    if threads:
        torch.set_num_threads(threads)
    print(f"nitorch-jit bench: {size}^3 float32 volume, displacement +-2 voxels, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    try:
        backend.load_module("pushpull", "cpu")  # shows the progress line on a first build
        have_c = True
    except Exception as e:  # report, then time what can be timed
        print(f"C kernels unavailable: {e}", file=sys.stderr)
        have_c = False
    img, grid = synthetic(size)
    ops = torch.ops.nitorch_jit
    gs_grid = voxel_to_grid_sample(grid, img.shape[2:])
    bound, extrap = [0] * 3, True  # replicate + extrapolate = grid_sample's 'border'

    def gs():
        return torch.nn.functional.grid_sample(img, gs_grid, mode="bilinear", padding_mode="border",
                                               align_corners=True)
    t_gs = timeit(gs, repeat)
    ref = gs()
    rows = []
    for label, order, op in [("pull linear", 1, "pull"), ("pull cubic", 3, "pull"),
                             ("push linear", 1, "push"), ("grad linear", 1, "grad")]:
        args = (img, grid, [order] * 3, bound, extrap)
        if op == "push":
            args = (img, grid, list(img.shape[2:]), [order] * 3, bound, extrap)
        c_fn = (lambda a=args, o=op: getattr(ops, f"grid_{o}")(*a)) if have_c else None
        t_fn = lambda a=args, o=op: getattr(torch_pp, f"grid_{o}")(*a)  # noqa: E731
        t_c = timeit(c_fn, repeat) if c_fn else float("nan")
        t_t = timeit(t_fn, max(1, repeat // 2))
        agree = "-"
        if c_fn:
            diff = (c_fn() - t_fn()).abs().max().item()
            agree = f"C-TORCH {diff:.1e}"
            if label == "pull linear":
                agree += f", C-grid_sample {(c_fn() - ref).abs().max().item():.1e}"
        rows.append((label, f"{t_c:.1f}", f"{t_t:.1f}", f"{t_t / t_c:.1f}x",
                     f"{t_gs / t_c:.1f}x" if label == "pull linear" else "", agree))
    rows.append(("grid_sample linear", "", "", "", "1.0x", f"{t_gs:.1f} ms"))
    print_table(rows, ["op", "C ms", "TORCH ms", "C vs TORCH", "C vs grid_sample", "max abs diff"])
    return 0
