"""GPU benchmark of the CUDA regsolve kernels (regulariser and FMG solver), ratios in one run.

    python scripts/bench_cuda_regsolve.py [--size 256] [--repeat 10] [--json FILE]

The workload of scripts/bench_solvers.py (nitorch_jit.bench.data.registration_data) on the GPU:
a size^3 x 3 float32 displacement grid, membrane 1e-3, bending 0.1, lame (0.05, 0.2), bound
dft (the default), a full voxel-wise Hessian (6 values, the Gauss-Newton Hessian of a smooth
random image). Rows, all on the same
device in the same run:

- regulariser_grid (the public API, [1, *S, 3] in and out) and the reg_matvec kernel itself
  ([1, 3, *S] contiguous), against
  (a) the same operator as torch.nn.functional.conv3d (nitorch_jit.bench.data.conv_regulariser:
      one grouped 5^3 conv and one 3->3 channel 3^3 conv, circular padding), with cuDNN's TF32
      off (float32 arithmetic, as ours) and on (PyTorch's default for convolutions);
  (b) the pure-PyTorch twin called directly (nitorch_jit.torch_impl.regsolve.reg_matvec with
      the same taps, what NI_COMPILED_BACKEND=TORCH runs);
  both checked equal to ours;
- reg_precond (the voxel solves with the full Hessian) and one reg_relax_ sweep (every colour
  of ops.regularisers.colour_periods: 4^3 with dft at 256^3);
- solve_grid_fmg (default settings: CG smoothing, 2 cycles, 2 iterations) with our kernels
  against the same FMG with the twin's (solvers.System(kernels=twin) + solvers.fmg, as
  `nitorch-jit bench --module regsolve` does), with the relative residual of both solutions.

Times are CUDA-event milliseconds, the minimum over --repeat runs after a warm-up (FMG and the
twin fewer). Effective bandwidth counts each tensor once (kernel rows: x and the result;
precond also the Hessian; relax x read and written, g and the Hessian read), against the
GPU's copy bandwidth measured in the same run. No speed goal is enforced. Exit status 0 (1
without a GPU). --device cpu is a smoke run of the script itself.
"""
import sys

import torch

import nitorch_jit as nj
from nitorch_jit.bench import backend_for, copy_bandwidth, measure, open_device, ratio
from nitorch_jit.bench.data import REG_KW as KW
from nitorch_jit.bench.data import conv_operator, conv_regulariser, registration_data
from nitorch_jit.bench.report import gpu_parser, print_table, write_json
from nitorch_jit.ops import regularisers as R
from nitorch_jit.ops import solvers as S
from nitorch_jit.torch_impl import regsolve as twin


def rel_residual(system, x, g):
    r = g - system.matvec(x)
    return float(r.double().norm() / g.double().norm())


def main():
    ap = gpu_parser(__doc__, size=256, repeat=10)
    args = ap.parse_args()
    dev, name = open_device(args.device, "bench_cuda_regsolve")
    kinds = {m: backend_for(m, dev) for m in ("regsolve", "resize")}
    n, rep = args.size, args.repeat
    print(f"bench_cuda_regsolve: {name}, torch {torch.__version__}, backends {kinds}, "
          f"{n}^3 x 3 float32 grid, membrane 1e-3, bending 0.1, lame (0.05, 0.2), dft",
          flush=True)
    bw = copy_bandwidth(dev, rep)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)

    v, g, h = (t.to(dev) for t in registration_data(n))
    p = S.grid_problem(h, g, None, 0, KW["membrane"], KW["bending"], KW["lame"], 1, 1, "dft")
    taps, x = p.taps, v.movedim(-1, 1).contiguous()  # [1, 3, *S]
    gx, hx = p.x.contiguous(), p.hessian.contiguous()
    period = R.colour_periods(taps, p.shape, p.bound)
    ops = torch.ops.nitorch_jit
    diag, cross = (t.to(dev) for t in conv_operator())

    # checks: ours against conv3d and the twin
    ours = ops.reg_matvec(x, None, None, taps)
    scale = ours.abs().max()
    tf32 = torch.backends.cudnn.allow_tf32
    checks = {}
    for label, on in (("conv3d", False), ("conv3d_tf32", True)):
        torch.backends.cudnn.allow_tf32 = on
        ref = conv_regulariser(v, diag, cross).movedim(-1, 1)
        checks[label] = float((ref - ours).abs().max() / scale)
    torch.backends.cudnn.allow_tf32 = tf32
    checks["twin"] = float((twin.reg_matvec(x, None, None, taps) - ours).abs().max() / scale)
    checks["api"] = float((nj.regulariser_grid(v, **KW).movedim(-1, 1) - ours).abs().max()
                          / scale)
    del ours, ref
    print("check: max |diff| / max |ours|: " + ", ".join(f"{k} {e:.1e}"
                                                          for k, e in checks.items()))

    def ms_per_call(fn, repeat, warmup=3):
        return measure(fn, repeat=repeat, warmup=warmup, device=dev).best_ms

    voxels, fbytes = n ** 3, 4
    io = 2 * 3 * voxels * fbytes                  # x in, result out
    rows, records = [], []

    def row(case, impl, ms, nbytes=None, peer_of=None):
        gbs = nbytes / (ms * 1e-3) / 1e9 if nbytes else None
        rows.append([case, impl, f"{ms:.3f}", f"{gbs:.0f}" if gbs else "",
                     f"{100 * gbs / bw:.0f} %" if gbs else "",
                     f"{ratio(ms, peer_of):.1f}x" if peer_of else ""])
        records.append({"case": case, "impl": impl, "ms": ms, "gbs": gbs,
                        "peer_over_ours": ratio(ms, peer_of) if peer_of else None})
        return ms

    def conv(on):
        def fn():
            torch.backends.cudnn.allow_tf32 = on
            conv_regulariser(v, diag, cross)
        return fn

    t_api = row("regulariser_grid", "ours (API)", ms_per_call(lambda: nj.regulariser_grid(v, **KW),
                                                         rep), io)
    t_mv = row("", "ours (reg_matvec kernel)", ms_per_call(lambda: ops.reg_matvec(x, None, None,
                                                                             taps), rep), io)
    row("", "conv3d, TF32 off", ms_per_call(conv(False), rep), io, t_api)
    row("", "conv3d, TF32 on", ms_per_call(conv(True), rep), io, t_api)
    torch.backends.cudnn.allow_tf32 = tf32
    row("", "torch twin", ms_per_call(lambda: twin.reg_matvec(x, None, None, taps),
                                 max(2, rep // 4)), io, t_mv)
    t_pc = row("reg_precond (full H)", "ours",
               ms_per_call(lambda: ops.reg_precond(gx, hx, None, taps), rep),
               io + 6 * voxels * fbytes)
    row("", "torch twin", ms_per_call(lambda: twin.reg_precond(gx, hx, None, taps),
                                 max(2, rep // 4)), None, t_pc)
    xr = x.clone()
    t_rx = row(f"reg_relax_ 1 sweep ({'x'.join(map(str, period))} colours)", "ours",
               ms_per_call(lambda: ops.reg_relax_(xr, hx, gx, None, taps, period, 1), rep),
               io + 3 * voxels * fbytes + 6 * voxels * fbytes)
    xt = x.clone()
    row("", "torch twin", ms_per_call(lambda: twin.reg_relax_(xt, hx, gx, None, taps, period, 1),
                                 1, warmup=1), None, t_rx)

    def fmg(kernels):  # the contiguous g and H (the API passes views of [1, *S, K] tensors)
        system = S.System(hx, None, taps, period, True, kernels)
        return S.fmg(p, gx, system, "cg", 2, 2)

    t_fmg = row("solve_grid_fmg (cg, 2x2)", "ours",
                ms_per_call(lambda: fmg(None), max(2, rep // 3)))
    row("", "ours (API)", ms_per_call(lambda: nj.solve_grid_fmg(h, g, **KW), max(2, rep // 3)))
    row("", "torch twin kernels", ms_per_call(lambda: fmg(twin), 1, warmup=1), None, t_fmg)
    system = S.System(hx, None, taps, period, True)
    res = {"ours": rel_residual(system, fmg(None), gx),
           "twin": rel_residual(system, fmg(twin), gx)}
    print_table(rows, ["case", "impl", "ms", "GB/s", "of copy", "peer/ours"])
    print(f"fmg relative residual: ours {res['ours']:.2e}, twin kernels {res['twin']:.2e}")
    write_json(args.json, {"device": name, "torch": torch.__version__, "size": n, "copy_gbs": bw,
                           "checks": checks, "fmg_residual": res, "rows": records})
    return 0


if __name__ == "__main__":
    sys.exit(main())
