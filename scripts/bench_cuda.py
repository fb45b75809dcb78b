"""GPU benchmark of the CUDA pushpull kernels against torch.nn.functional.grid_sample.

    python scripts/bench_cuda.py [--size 256] [--repeat 20] [--json FILE] [--device cuda]

(--device cpu --size 16 --repeat 1: a smoke run of the script itself.)

One synthetic float32 volume (size^3, one channel) and two grids with displacements within
+-2 voxels: "smooth" (identity + a smooth random field, as in registration) and "iid"
(identity + independent uniform(-2, 2) per voxel, nitorch_jit.bench.synthetic as in
`nitorch-jit bench`: the worst case for a scatter, neighbouring points land anywhere in a
5x5x5 neighbourhood). Times, in one run: the GPU's copy bandwidth (a 1 GiB device-to-device
copy), grid_sample (trilinear, zeros, align_corners=True) forward and forward+backward, and
nitorch_jit's order-1 pull (bound zero, extrapolate=True: the same operator), push, grad_dot,
the fused backward (grid_pull_backward) and pull forward+backward, each scatter also with the
block-tiled kernel turned off (the cuda_tiles knob, NI_JIT_CUDA_TILES=0), plus a few other rows (order 3 push on
both grids, bfloat16). Effective bandwidth counts each tensor once (grid, values, output; the
sampled image once). Checks the issue's
targets for each grid: pull >= 1.2x faster than grid_sample, push <= 2x pull,
forward+backward >= 1.5x faster than grid_sample's. Also reports the first CUDA compile of
the module (or the cached build's time). Exit status 0 always (the targets are reported, not
enforced); 1 when no GPU is available.
"""
import sys

import torch
import torch.nn.functional as F

import nitorch_jit as nj
from nitorch_jit.bench import (
    backend_for, copy_bandwidth, measure, open_device, ratio, stopwatch,
)
from nitorch_jit.bench.data import affine_matrix, smooth_grid, synthetic, voxel_to_grid_sample
from nitorch_jit.bench.report import gpu_parser, print_table, write_json
from nitorch_jit.backends import tuning


def compile_time(device):
    """Seconds of the first CUDA build of pushpull in this cache ('cached: N s' if it existed)."""
    from nitorch_jit.jit import cache
    if device.type != "cuda":
        backend_for("pushpull", device)
        return None, "n/a (not CUDA)"

    def built():
        out = [e for e in cache.entries() if e.manifest["key"].get("module") == "pushpull"
               and e.manifest["key"].get("device") == "cuda"]
        return sorted(out, key=lambda e: e.manifest.get("built_at_epoch", 0))

    before = {e.path for e in built()}
    with stopwatch() as sw:
        which = backend_for("pushpull", "cuda")
    seconds = sw.wall_ms / 1e3
    if which != "C":
        raise SystemExit(f"the CUDA kernels are not compiled (served by {which}); see the warning")
    new = [e for e in built() if e.path not in before]
    if new:
        return seconds, f"{seconds:.0f} s (compiled now, archs {new[-1].manifest['key'].get('archs')})"
    entries = built()
    if entries:
        s = entries[-1].manifest.get("build_seconds")
        archs = entries[-1].manifest["key"].get("archs")
        return s, f"cached (its build took {s:.0f} s, archs {archs})" if s else "cached"
    return None, "cached"


def main(argv=None):
    ap = gpu_parser(__doc__, size=256, repeat=20)
    args = ap.parse_args(argv)
    device, name = open_device(args.device, "bench_cuda")

    def ms_per_call(fn):
        """ms per call: the best of 3 rounds of --repeat calls back to back (CUDA events)."""
        return measure(fn, repeat=3, number=args.repeat, device=device).best_ms

    _, compile_msg = compile_time(device)
    n = args.size
    print(f"bench_cuda: {name}, torch {torch.__version__}, {n}^3 float32, 1 channel, "
          f"displacement +-2 voxels", flush=True)
    print(f"first CUDA compile of pushpull: {compile_msg}", flush=True)
    bw = copy_bandwidth(device, args.repeat)
    print(f"copy bandwidth: {bw:.0f} GB/s", flush=True)

    img, iid = synthetic(n, 3, torch.float32, device)
    shape = [n] * 3
    smooth = smooth_grid(n, device)
    P = N = n ** 3
    f4 = 4
    b_pull = P * 3 * f4 + P * f4 + N * f4            # grid, output, image
    b_push = P * 3 * f4 + P * f4 + N * f4            # grid, values, output
    b_dot = P * 3 * f4 + P * f4 + N * f4 + P * 3 * f4  # grid, weight, image, output
    b_bwd = P * 3 * f4 + P * f4 + N * f4 + N * f4 + P * 3 * f4  # + input grad, grid grad
    opts1 = dict(interpolation=1, bound="zero", extrapolate=True)
    rows, res, agree = [], {}, {}

    def row(key, label, ms, nbytes):
        gbs = nbytes / (ms * 1e-3) / 1e9
        res[key] = dict(ms=ms, gbs=gbs)
        rows.append([label, f"{ms:.3f}", f"{gbs:.0f}", f"{100 * gbs / bw:.0f}%"])
        print(f"  {label}: {ms:.3f} ms", flush=True)

    def gs(x, g):
        return F.grid_sample(x, g, mode="bilinear", padding_mode="zeros", align_corners=True)

    def rel(a, b):  # relative L2 difference
        return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()

    def untiled(fn):
        """fn with the block-tiled scatter of push / pull_backward turned off."""
        def run():
            with tuning.override(cuda_tiles=False):
                return fn()
        return run

    for case, grid in [("smooth", smooth), ("iid", iid)]:
        tag = f" [{case}]"
        gs_grid = voxel_to_grid_sample(grid, shape)
        ours = nj.grid_pull(img, grid, **opts1)
        agree[case] = dict(pull=rel(ours, gs(img, gs_grid)))
        row("grid_sample" + tag, "grid_sample forward" + tag,
            ms_per_call(lambda: gs(img, gs_grid)), b_pull)
        row("pull1" + tag, "pull order 1" + tag,
            ms_per_call(lambda: nj.grid_pull(img, grid, **opts1)), b_pull)
        push1 = lambda: nj.grid_push(ours, grid, shape, **opts1)  # noqa: E731
        row("push1" + tag, "push order 1" + tag, ms_per_call(push1), b_push)
        row("push1_untiled" + tag, "push order 1, one-point kernel (tiles off)" + tag,
            ms_per_call(untiled(push1)), b_push)
        row("grad_dot1" + tag, "grad_dot order 1 (backward's grid part)" + tag,
            ms_per_call(lambda: torch.ops.nitorch_jit.grid_grad_dot(ours, img, grid, [1] * 3,
                                                                    [6] * 3, True)), b_dot)
        pullback1 = lambda: torch.ops.nitorch_jit.grid_pull_backward(  # noqa: E731
            ours, img, grid, [1] * 3, [6] * 3, True)
        row("pullback1" + tag, "pull_backward order 1 (fused push + grad_dot)" + tag,
            ms_per_call(pullback1), b_bwd)
        row("pullback1_untiled" + tag, "pull_backward order 1, tiles off" + tag,
            ms_per_call(untiled(pullback1)), b_bwd)
        x = img.clone().requires_grad_()
        g = grid.clone().requires_grad_()
        gsg = gs_grid.clone().requires_grad_()
        gout = torch.randn_like(ours)

        def fb_gs():
            return torch.autograd.grad(gs(x, gsg), (x, gsg), gout)

        def fb_ours():
            return torch.autograd.grad(nj.grid_pull(x, g, **opts1), (x, g), gout)

        gx_gs, gg_gs = fb_gs()
        gx, gg = fb_ours()
        # grid_sample's grid gradient, back in voxels (tensor order): d/dvox = d/dnorm * 2/(n-1)
        agree[case].update(input_grad=rel(gx, gx_gs),
                           grid_grad=rel(gg, gg_gs.flip(-1) * (2.0 / (n - 1))))
        del gx_gs, gg_gs, gx, gg
        row("fb_grid_sample" + tag, "grid_sample forward+backward" + tag,
            ms_per_call(fb_gs), b_pull + b_bwd)
        row("fb_pull1" + tag, "pull order 1 forward+backward" + tag,
            ms_per_call(fb_ours), b_pull + b_bwd)
        row("fb_pull1_untiled" + tag, "pull order 1 forward+backward, tiles off" + tag,
            ms_per_call(untiled(fb_ours)), b_pull + b_bwd)
        del x, g, gsg, gout, ours

    # other rows (smooth grid): cubic, a mirrored bound without extrapolation, bfloat16; a
    # failure here is reported and does not lose the table
    grid = smooth
    ours = nj.grid_pull(img, grid, **opts1)
    opts3 = dict(interpolation=3, bound="dct2", extrapolate=True)
    optsd = dict(interpolation=1, bound="dct2", extrapolate=False)
    hb = img.bfloat16() if device.type == "cuda" else None
    extras = [
        ("pull3", "pull order 3 (dct2)", lambda: nj.grid_pull(img, grid, **opts3), b_pull),
        ("push3", "push order 3 (dct2)", lambda: nj.grid_push(ours, grid, shape, **opts3), b_push),
        ("push3_untiled", "push order 3 (dct2), tiles off",
         untiled(lambda: nj.grid_push(ours, grid, shape, **opts3)), b_push),
        ("push3_iid", "push order 3 (dct2) [iid]",
         lambda: nj.grid_push(ours, iid, shape, **opts3), b_push),
        ("push3_iid_untiled", "push order 3 (dct2) [iid], tiles off",
         untiled(lambda: nj.grid_push(ours, iid, shape, **opts3)), b_push),
        ("pull1_dct2", "pull order 1 (dct2, no extrapolation)",
         lambda: nj.grid_pull(img, grid, **optsd), b_pull),
    ]
    # affine resampling without a grid (a 10-degree rotation about the centre plus a shift)
    # against grid_pull on the materialised grid, same points
    aff = affine_matrix(shape, 10, 1.0, (1.5, 1.5, 1.5), device=device)[None]
    agrid = nj.affine_grid(aff, shape)
    for order in (1, 3):
        o = dict(interpolation=order, bound="dct2", extrapolate=False)
        extras += [
            (f"affine_pull{order}", f"affine_pull order {order} (no grid)",
             lambda o=o: nj.affine_pull(img, aff, shape, **o), b_pull - P * 3 * f4),
            (f"affine_grid_pull{order}", f"grid_pull order {order} on the same affine grid",
             lambda o=o: nj.grid_pull(img, agrid, **o), b_pull)]
    # 2-D 256^2 x batch 32 x 3 channels, order 1, forward + backward, vs grid_sample's
    img2, grid2 = synthetic(256, 2, torch.float32, device, channels=3)
    img2, grid2 = img2.expand(32, -1, -1, -1).contiguous(), grid2.expand(32, -1, -1, -1).contiguous()
    gs2 = voxel_to_grid_sample(grid2, [256, 256])
    x2, g2, gs2 = (t.clone().requires_grad_() for t in (img2, grid2, gs2))
    gout2 = torch.randn_like(img2)
    extras += [
        ("fb2d_grid_sample", "2-D 256^2 x 32 x 3ch grid_sample forward+backward",
         lambda: torch.autograd.grad(F.grid_sample(x2, gs2, align_corners=True), (x2, gs2),
                                     gout2), 0),
        ("fb2d_pull1", "2-D 256^2 x 32 x 3ch pull order 1 forward+backward",
         lambda: torch.autograd.grad(nj.grid_pull(x2, g2, **opts1), (x2, g2), gout2), 0)]
    if hb is not None:
        extras.append(("pull1_bf16", "pull order 1 bfloat16 data, float32 grid",
                       lambda: nj.grid_pull(hb, grid, **opts1), P * 3 * f4 + (P + N) * 2))
    for key, label, fn, nbytes in extras:
        try:
            row(key, label, ms_per_call(fn), nbytes)
        except Exception as e:  # noqa: BLE001
            print(f"  {label}: FAILED {type(e).__name__}: {e}", flush=True)
    del hb, agrid, x2, g2, gs2, gout2
    for a, b in [("affine_grid_pull1", "affine_pull1"), ("affine_grid_pull3", "affine_pull3"),
                 ("fb2d_grid_sample", "fb2d_pull1")]:
        if a in res and b in res:
            print(f"ratio {a} / {b} (time): {ratio(res[a]['ms'], res[b]['ms']):.2f}")

    print()
    print_table(rows, ["op", "ms", "GB/s", "of copy bw"])
    print()
    summary = {}
    for case in ("smooth", "iid"):
        tag = f" [{case}]"
        ms = {k[:-len(tag)]: v["ms"] for k, v in res.items() if k.endswith(tag)}
        speed_pull = ratio(ms["grid_sample"], ms["pull1"])
        push_ratio = ratio(ms["push1"], ms["pull1"])
        speed_fb = ratio(ms["fb_grid_sample"], ms["fb_pull1"])
        push_ratio_off = ratio(ms["push1_untiled"], ms["pull1"])
        speed_fb_off = ratio(ms["fb_grid_sample"], ms["fb_pull1_untiled"])
        targets = [
            ("pull order 1 vs grid_sample (speedup)", speed_pull, ">= 1.2", speed_pull >= 1.2),
            ("push / pull (time ratio)", push_ratio, "<= 2.0", push_ratio <= 2.0),
            ("forward+backward vs grid_sample's (speedup)", speed_fb, ">= 1.5", speed_fb >= 1.5),
        ]
        a = agree[case]
        print(f"vs grid_sample{tag}, relative L2 difference: pull {a['pull']:.1e}, input "
              f"gradient {a['input_grad']:.1e}, grid gradient {a['grid_grad']:.1e}")
        for label, value, want, ok in targets:
            print(f"TARGET{tag} {label}: {value:.2f} (want {want}) {'PASS' if ok else 'MISS'}")
        print(f"tiles off{tag}: push / pull {push_ratio_off:.2f}, forward+backward vs "
              f"grid_sample's {speed_fb_off:.2f}")
        summary[case] = dict(pull_vs_grid_sample=speed_pull, push_over_pull=push_ratio,
                             fwd_bwd_vs_grid_sample=speed_fb, agreement=a,
                             tiles_off=dict(push_over_pull=push_ratio_off,
                                            fwd_bwd_vs_grid_sample=speed_fb_off),
                             targets_met=all(t[3] for t in targets))
    out = dict(device=name, torch=torch.__version__, size=n, copy_gbs=bw, compile=compile_msg,
               rows=res, cases=summary)
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
