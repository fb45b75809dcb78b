"""CPU speed of the resampling ops against their peers, measured in one run (issues 3 and 11).

3-D 128^3 (and 2-D 512^2) float32, grid = identity + uniform(-2, 2) voxels, 2 threads by default;
then the deep-learning shapes of issue 11 (a 2-D batch, 3-D with 8 channels, 1 thread, bicubic).
Prints one table of times and ratios with the goal of each row.
usage: python scripts/bench_pushpull.py [--threads 2] [--repeat 5] [--size3 128] [--size2 512]
       [--no-compile] [--only-issue11]
"""
import argparse
import time
import warnings

import torch

import nitorch_jit as nj
from nitorch_jit import backends
from nitorch_jit.bench import print_table, synthetic, timeit, voxel_to_grid_sample
from nitorch_jit.torch_impl import pushpull as torch_pp

warnings.filterwarnings("ignore")
ops = torch.ops.nitorch_jit


def peers():
    try:
        import interpol
    except ImportError:
        interpol = None
    try:
        import scipy.ndimage as ndi
    except ImportError:
        ndi = None
    return interpol, ndi


def bench_dim(dim, size, repeat, rows, compiled_torch):
    interpol, ndi = peers()
    img, grid = synthetic(size, dim)
    shape = list(img.shape[2:])
    tag = f"{dim}-D {size}^{dim}"
    rep = [0] * dim
    gs_grid = voxel_to_grid_sample(grid, shape)
    mode = "bilinear"

    def gs():
        return torch.nn.functional.grid_sample(img, gs_grid, mode=mode, padding_mode="border",
                                               align_corners=True)

    def c_pull1():
        return ops.grid_pull(img, grid, [1] * dim, rep, True)

    t_gs = timeit(gs, repeat)
    t_c1 = timeit(c_pull1, repeat)
    err = (c_pull1() - gs()).abs().max().item()
    rows.append((tag, "pull order 1", f"{t_c1:.2f}", "grid_sample", f"{t_gs:.2f}",
                 f"{t_gs / t_c1:.2f}", ">= 4" if dim == 3 else ">= 2", f"max diff {err:.1e}"))
    if compiled_torch:
        fn = torch.compile(torch_pp.grid_pull)
        t0 = time.perf_counter()
        fn(img, grid, [1] * dim, rep, True)
        t_compile = time.perf_counter() - t0
        t_tc = timeit(lambda: fn(img, grid, [1] * dim, rep, True), repeat)
        rows.append((tag, "pull order 1", f"{t_c1:.1f}", "TORCH + torch.compile", f"{t_tc:.1f}",
                     f"{t_tc / t_c1:.2f}", ">= 1.5" if dim == 3 else "",
                     f"compile {t_compile:.0f} s"))
    t_te = timeit(lambda: torch_pp.grid_pull(img, grid, [1] * dim, rep, True), max(1, repeat // 2))
    rows.append((tag, "pull order 1", f"{t_c1:.1f}", "TORCH eager", f"{t_te:.1f}",
                 f"{t_te / t_c1:.2f}", "", ""))
    if interpol is not None:
        t_i = timeit(lambda: interpol.grid_pull(img, grid, interpolation=1, bound="replicate",
                                                extrapolate=True), max(1, repeat // 2))
        rows.append((tag, "pull order 1", f"{t_c1:.1f}", "torch-interpol", f"{t_i:.1f}",
                     f"{t_i / t_c1:.2f}", ">= 20" if dim == 3 else "", ""))
    # order 3 vs scipy
    t_c3 = timeit(lambda: ops.grid_pull(img, grid, [3] * dim, rep, True), repeat)
    if ndi is not None:
        arr = img[0, 0].numpy()
        coords = grid[0].movedim(-1, 0).numpy()
        t_s = timeit(lambda: ndi.map_coordinates(arr, coords, order=3, mode="nearest",
                                                 prefilter=False), max(1, repeat // 2))
        ref = torch.from_numpy(ndi.map_coordinates(arr, coords, order=3, mode="nearest", prefilter=False))
        err = (ops.grid_pull(img, grid, [3] * dim, rep, True)[0, 0] - ref).abs().max().item()
        rows.append((tag, "pull order 3", f"{t_c3:.1f}", "scipy map_coordinates", f"{t_s:.1f}",
                     f"{t_s / t_c3:.2f}", ">= 5" if dim == 3 else "", f"max diff {err:.1e}"))
    # push
    t_p = timeit(lambda: ops.grid_push(img, grid, shape, [1] * dim, rep, True), repeat)
    rows.append((tag, "push order 1", f"{t_p:.1f}", "(pull order 1)", f"{t_c1:.1f}",
                 f"{t_c1 / t_p:.2f}", "", ""))
    if interpol is not None:
        t_ip = timeit(lambda: interpol.grid_push(img, grid, shape, interpolation=1,
                                                 bound="replicate", extrapolate=True),
                      max(1, repeat // 2))
        rows.append((tag, "push order 1", f"{t_p:.1f}", "torch-interpol push", f"{t_ip:.1f}",
                     f"{t_ip / t_p:.2f}", ">= 10" if dim == 3 else "", ""))
    # the backward of pull: fused (one pass) against the two separate ops
    y = ops.grid_pull(img, grid, [1] * dim, rep, True)
    t_pb = timeit(lambda: ops.grid_pull_backward(y, img, grid, [1] * dim, rep, True), repeat)
    t_sep = timeit(lambda: (ops.grid_push(y, grid, shape, [1] * dim, rep, True),
                            ops.grid_grad_dot(y, img, grid, [1] * dim, rep, True)), repeat)
    rows.append((tag, "pull_backward order 1", f"{t_pb:.1f}", "push + grad_dot", f"{t_sep:.1f}",
                 f"{t_sep / t_pb:.2f}", "", "fused vs separate"))
    # forward + backward (image and grid)
    c_fb, gs_fb = fwd_bwd_pair(img, grid, mode)
    t_cfb = timeit(c_fb, repeat)
    t_gfb = timeit(gs_fb, repeat)
    rows.append((tag, "pull order 1 fwd+bwd", f"{t_cfb:.2f}", "grid_sample fwd+bwd", f"{t_gfb:.2f}",
                 f"{t_gfb / t_cfb:.2f}", ">= 4" if dim == 3 else ">= 1.5", "image and grid grads"))


def fwd_bwd_pair(img, grid, mode="bilinear", order=1):
    """Forward + backward (image and grid gradients) of grid_pull and of grid_sample on the same
    points (replicate / border, align_corners=True)."""
    x = img.clone().requires_grad_()
    g = grid.clone().requires_grad_()
    gsg = voxel_to_grid_sample(grid, list(img.shape[2:])).requires_grad_()

    def ours():
        out = nj.grid_pull(x, g, interpolation=order, bound="replicate", extrapolate=True)
        out.backward(torch.ones_like(out))

    def peer():
        out = torch.nn.functional.grid_sample(x, gsg, mode=mode, padding_mode="border",
                                              align_corners=True)
        out.backward(torch.ones_like(out))
    return ours, peer


def pull_pair(img, grid, order, mode):
    dim = grid.shape[-1]
    gs_grid = voxel_to_grid_sample(grid, list(img.shape[2:]))

    def ours():
        return ops.grid_pull(img, grid, [order] * dim, [0] * dim, True)

    def peer():
        return torch.nn.functional.grid_sample(img, gs_grid, mode=mode, padding_mode="border",
                                               align_corners=True)
    err = (ours() - peer()).abs().max().item()
    return ours, peer, err


def bench_issue11(size2, size3, threads, repeat, rows):
    """Issue 11's deep-learning shapes: 1 thread, bicubic, a 2-D batch, 3-D with 8 channels."""
    img, grid = synthetic(size2, 2)
    tag = f"2-D {size2}^2"
    ours, peer, err = pull_pair(img, grid, 1, "bilinear")
    torch.set_num_threads(1)
    t_o, t_p = timeit(ours, repeat), timeit(peer, repeat)
    torch.set_num_threads(threads)
    rows.append((tag, "pull order 1, 1 thread", f"{t_o:.2f}", "grid_sample, 1 thread",
                 f"{t_p:.2f}", f"{t_p / t_o:.2f}", ">= 1.5", f"max diff {err:.1e}"))
    ours, peer, err = pull_pair(img, grid, 3, "bicubic")
    t_o, t_p = timeit(ours, repeat), timeit(peer, repeat)
    rows.append((tag, "pull order 3", f"{t_o:.2f}", "grid_sample bicubic", f"{t_p:.2f}",
                 f"{t_p / t_o:.2f}", ">= 1", "different splines (16 taps each)"))
    # a batch of 32 RGB 256^2 images, each with its own grid
    gen = torch.Generator().manual_seed(0)
    bimg = torch.randn(32, 3, 256, 256, generator=gen)
    _, g1 = synthetic(256, 2)
    bgrid = (g1 + torch.rand(32, 256, 256, 2, generator=gen) - 0.5).contiguous()
    tag = "2-D 256^2 x 32 x 3ch"
    ours, peer, err = pull_pair(bimg, bgrid, 1, "bilinear")
    t_o, t_p = timeit(ours, repeat), timeit(peer, repeat)
    rows.append((tag, "pull order 1", f"{t_o:.1f}", "grid_sample", f"{t_p:.1f}",
                 f"{t_p / t_o:.2f}", ">= 2", f"max diff {err:.1e}"))
    ours, peer = fwd_bwd_pair(bimg, bgrid)
    t_o, t_p = timeit(ours, repeat), timeit(peer, repeat)
    rows.append((tag, "pull order 1 fwd+bwd", f"{t_o:.1f}", "grid_sample fwd+bwd", f"{t_p:.1f}",
                 f"{t_p / t_o:.2f}", ">= 1.5", "image and grid grads"))
    del bimg, bgrid
    # 3-D, 8 channels: against grid_sample and against our own 1-channel time
    img1, grid3 = synthetic(size3, 3)
    img8, _ = synthetic(size3, 3, channels=8)
    tag = f"3-D {size3}^3 x 8ch"
    ours1, _, _ = pull_pair(img1, grid3, 1, "bilinear")
    ours, peer, err = pull_pair(img8, grid3, 1, "bilinear")
    t_1, t_o, t_p = timeit(ours1, repeat), timeit(ours, repeat), timeit(peer, repeat)
    rows.append((tag, "pull order 1", f"{t_o:.1f}", "grid_sample", f"{t_p:.1f}",
                 f"{t_p / t_o:.2f}", ">= 8", f"max diff {err:.1e}"))
    rows.append((tag, "pull order 1", f"{t_o:.1f}", "(ours, 1 channel)", f"{t_1:.1f}",
                 f"{t_o / t_1:.2f}", "<= 3", "ratio = 8ch / 1ch time"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--size3", type=int, default=128)
    ap.add_argument("--size2", type=int, default=512)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    ap.add_argument("--only-issue11", action="store_true",
                    help="only the 2-D 512^2 rows and issue 11's shapes")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    backends.load_module("pushpull", "cpu")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, "
          f"displacement +-2 voxels, min of {args.repeat} runs (ms); ratio = peer / nitorch_jit")
    rows = []
    if not args.only_issue11:
        bench_dim(3, args.size3, args.repeat, rows, not args.no_compile)
    bench_dim(2, args.size2, args.repeat, rows, not args.no_compile)
    bench_issue11(args.size2, args.size3, args.threads, args.repeat, rows)
    print_table(rows, ["data", "op", "nitorch_jit C", "peer", "peer ms", "ratio", "goal", "note"])


if __name__ == "__main__":
    main()
