"""`nitorch-jit bench`: compile on first use, then time the C and TORCH kernels and grid_sample
on one synthetic 3-D volume, check they agree, and print a table."""
import sys

import torch

from ..codes import bound_code
from . import backend_for, measure, ratio, stopwatch
from .data import REG_KW, synthetic, voxel_to_grid_sample
from .report import print_table


def run_bench(size=128, threads=None, repeat=5, modules=("pushpull",)):
    """Time the compiled kernels of `modules` against their pure-PyTorch twins and peers.

    Parameters
    ----------
    size : int
        Edge of the 3-D volume.
    threads : int, optional
        ``torch.set_num_threads`` (default: torch's).
    repeat : int
        Timed runs of ours (the TORCH twin: half as many); the best counts.
    modules : sequence of str
        Any of 'pushpull', 'splinc', 'resize', 'regsolve'.

    Returns
    -------
    int
        The exit status (0).

    Examples
    --------
    >>> from nitorch_jit.bench.cli import run_bench
    >>> run_bench(size=8, repeat=1)  # doctest: +SKIP
    0
    """
    if threads:
        torch.set_num_threads(threads)
    status = 0
    if "pushpull" in modules:
        status |= _bench_pushpull(size, repeat)
    if "splinc" in modules or "resize" in modules:
        status |= _bench_resize(size, repeat, modules)
    if "regsolve" in modules:
        status |= _bench_regsolve(size, repeat)
    return status


def _c_and_twin(ours, twin, repeat):
    """{'C': Timing, 'TORCH': Timing}: C timed before and after its twin, the twin half as
    often."""
    return measure({"C": ours, "TORCH": twin}, repeat={"C": repeat, "TORCH": max(1, repeat // 2)},
                   ours="C")


def _bench_regsolve(size, repeat):
    """regulariser_grid and solve_grid_fmg (issue workload), C against the TORCH twin run in
    this process on the same data (scripts/bench_solvers.py adds conv3d and PCG)."""
    from ..ops import regularisers as R
    from ..ops import solvers as S
    from ..torch_impl import regsolve as twin
    print(f"nitorch-jit bench: regularisers / FMG, {size}^3 x 3 float32 displacement grid, "
          f"membrane 1e-3, bending 0.1, lame (0.05, 0.2), full Hessian, "
          f"{torch.get_num_threads()} threads", flush=True)
    kw = REG_KW
    g = torch.Generator().manual_seed(0)
    shape = [size] * 3
    v = torch.randn([1] + shape + [3], generator=g)
    h = torch.cat([torch.rand([1] + shape + [3], generator=g) + 0.01,
                   torch.zeros([1] + shape + [3])], -1)
    with stopwatch() as sw:
        name = backend_for("regsolve", "cpu")
        R.regulariser_grid(v[:, :4, :4, :4], **kw)
    print(f"  regsolve CPU backend: {name} (ready in {sw.wall_ms / 1e3:.1f} s)", flush=True)
    p = S.grid_problem(h, v, None, 0, kw["membrane"], kw["bending"], kw["lame"], 1, 1, "dft")
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
        t = measure({"C": ours, "TORCH": peer}, repeat=n, ours="C")
        rows.append((label, f"{t['C'].best_ms:.1f} ms", f"{t['TORCH'].best_ms:.1f} ms",
                     f"{ratio(t['TORCH'], t['C']):.1f}x"))
    print_table(rows, ["routine", name, "TORCH", "speed-up"])
    print(f"  max |C - TORCH| of the operator: {err:.2e}")
    return 0


def _bench_resize(size, repeat, modules):
    from ..ops import resize as R
    from ..ops import splinc as S
    from ..torch_impl import resize as torch_rs
    from ..torch_impl import splinc as torch_sc
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
            backend_for(module, "cpu", require_compiled=True)
            t = _c_and_twin(ours, twin, repeat)
            diff = f"C-TORCH {(ours() - twin()).abs().max().item():.1e}"
        except Exception as e:  # report, then time what can be timed
            print(f"C kernels of {module} unavailable: {e}", file=sys.stderr)
            t = {"C": None, "TORCH": measure(twin, repeat=max(1, repeat // 2))}
            diff = "-"
        t_c = t["C"].best_ms if t["C"] else float("nan")
        rows.append((label, f"{t_c:.1f}", f"{t['TORCH'].best_ms:.1f}",
                     f"{ratio(t['TORCH'], t['C']):.1f}x", diff))
    print_table(rows, ["op", "C ms", "TORCH ms", "C vs TORCH", "max abs diff"])
    return 0


def _bench_pushpull(size, repeat):
    from ..ops import pushpull as P
    from ..torch_impl import pushpull as torch_pp
    print(f"nitorch-jit bench: {size}^3 float32 volume, displacement +-2 voxels, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    try:
        backend_for("pushpull", "cpu", require_compiled=True)  # the progress line of a build
        have_c = True
    except Exception as e:  # report, then time what can be timed
        print(f"C kernels unavailable: {e}", file=sys.stderr)
        have_c = False
    img, grid = synthetic(size)
    gs_grid = voxel_to_grid_sample(grid, img.shape[2:])
    # replicate + extrapolate = grid_sample's 'border'; the twin takes the bound's code
    bound, extrap = "replicate", True
    codes = [bound_code(bound)] * 3

    def gs():
        return torch.nn.functional.grid_sample(img, gs_grid, mode="bilinear", padding_mode="border",
                                               align_corners=True)
    t_gs = measure(gs, repeat=repeat)
    ref = gs()
    rows = []
    for label, order, op in [("pull linear", 1, "pull"), ("pull cubic", 3, "pull"),
                             ("push linear", 1, "push"), ("grad linear", 1, "grad")]:
        shape = [list(img.shape[2:])] if op == "push" else []
        ours = (img, grid, *shape, order, bound, extrap)
        twin = (img, grid, *shape, [order] * 3, codes, extrap)
        c_fn = (lambda a=ours, o=op: getattr(P, f"grid_{o}")(*a)) if have_c else None
        t_fn = lambda a=twin, o=op: getattr(torch_pp, f"grid_{o}")(*a)  # noqa: E731
        if c_fn:
            t = _c_and_twin(c_fn, t_fn, repeat)
        else:
            t = {"C": None, "TORCH": measure(t_fn, repeat=max(1, repeat // 2))}
        t_c = t["C"].best_ms if t["C"] else float("nan")
        agree = "-"
        if c_fn:
            diff = (c_fn() - t_fn()).abs().max().item()
            agree = f"C-TORCH {diff:.1e}"
            if label == "pull linear":
                agree += f", C-grid_sample {(c_fn() - ref).abs().max().item():.1e}"
        rows.append((label, f"{t_c:.1f}", f"{t['TORCH'].best_ms:.1f}",
                     f"{ratio(t['TORCH'], t_c):.1f}x",
                     f"{ratio(t_gs, t_c):.1f}x" if label == "pull linear" else "", agree))
    rows.append(("grid_sample linear", "", "", "", "1.0x", f"{t_gs.best_ms:.1f} ms"))
    print_table(rows, ["op", "C ms", "TORCH ms", "C vs TORCH", "C vs grid_sample", "max abs diff"])
    return 0
