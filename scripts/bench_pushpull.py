"""CPU speed of the resampling ops against their peers, measured in one run (issues 3 and 11).

3-D 128^3 (and 2-D 512^2) float32, grid = identity + uniform(-2, 2) voxels, 2 threads by default;
then the deep-learning shapes of issue 11 (a 2-D batch, 3-D with 8 channels, 1 thread, bicubic).
Prints one table of times and ratios with the goal of each row.
usage: python scripts/bench_pushpull.py [--threads 2] [--repeat 5] [--size3 128] [--size2 512]
       [--no-compile] [--only-issue11] [--record FILE]
(a smoke run: --size3 16 --size2 32 --repeat 1 --no-compile)
--record FILE also writes the table as a record of the documentation's benchmark pages
(docs/benchmarks/data/pushpull_cpu.json is this table).
"""
import argparse
import warnings

import torch

import nitorch_jit as nj
from nitorch_jit.bench import backend_for, measure, optional, ratio, stopwatch
from nitorch_jit.bench.data import synthetic, voxel_to_grid_sample
from nitorch_jit.bench.report import print_table, write_record
from nitorch_jit.torch_impl import pushpull as torch_pp

warnings.filterwarnings("ignore")
ops = torch.ops.nitorch_jit


def ours_and_peers(ours, peers, repeat, slow=()):
    """{name: best ms}: ours timed before and after its peers; the `slow` peers half as often."""
    reps = {k: max(1, repeat // 2) if k in slow else repeat for k in ["ours", *peers]}
    t = measure({"ours": ours, **peers}, repeat=reps, ours="ours")
    return {k: v.best_ms for k, v in t.items()}


def bench_dim(dim, size, repeat, rows, compiled_torch):
    interpol, ndi = optional("interpol"), optional("scipy.ndimage")
    img, grid = synthetic(size, dim)
    shape = list(img.shape[2:])
    tag = f"{dim}-D {size}^{dim}"
    rep = [0] * dim
    gs_grid = voxel_to_grid_sample(grid, shape)
    mode = "bilinear"
    goal3 = (lambda g, g2="": g if dim == 3 else g2)  # noqa: E731

    def add(op, ours_ms, peer, peer_ms, goal="", note="", fmt=".1f"):
        rows.append((tag, op, f"{ours_ms:{fmt}}", peer, f"{peer_ms:{fmt}}",
                     f"{ratio(peer_ms, ours_ms):.2f}", goal, note))

    def gs():
        return torch.nn.functional.grid_sample(img, gs_grid, mode=mode, padding_mode="border",
                                               align_corners=True)

    def c_pull1():
        return ops.grid_pull(img, grid, [1] * dim, rep, True)

    # pull order 1 against grid_sample, TORCH (eager, compiled) and torch-interpol
    pull_peers = {"grid_sample": gs,
                  "TORCH eager": lambda: torch_pp.grid_pull(img, grid, [1] * dim, rep, True)}
    if compiled_torch:
        fn = torch.compile(torch_pp.grid_pull)
        with stopwatch() as sw:
            fn(img, grid, [1] * dim, rep, True)
        t_compile = sw.wall_ms / 1e3
        pull_peers["TORCH + torch.compile"] = lambda: fn(img, grid, [1] * dim, rep, True)
    if interpol is not None:
        pull_peers["torch-interpol"] = lambda: interpol.grid_pull(
            img, grid, interpolation=1, bound="replicate", extrapolate=True)
    t = ours_and_peers(c_pull1, pull_peers, repeat, slow=("TORCH eager", "torch-interpol"))
    t_c1 = t["ours"]
    err = (c_pull1() - gs()).abs().max().item()
    add("pull order 1", t_c1, "grid_sample", t["grid_sample"], goal3(">= 4", ">= 2"),
        f"max diff {err:.1e}", ".2f")
    if compiled_torch:
        add("pull order 1", t_c1, "TORCH + torch.compile", t["TORCH + torch.compile"],
            goal3(">= 1.5"), f"compile {t_compile:.0f} s")
    add("pull order 1", t_c1, "TORCH eager", t["TORCH eager"])
    if interpol is not None:
        add("pull order 1", t_c1, "torch-interpol", t["torch-interpol"], goal3(">= 20"))
    # order 3 vs scipy
    if ndi is not None:
        c_pull3 = lambda: ops.grid_pull(img, grid, [3] * dim, rep, True)  # noqa: E731
        arr = img[0, 0].numpy()
        coords = grid[0].movedim(-1, 0).numpy()
        scipy3 = lambda: ndi.map_coordinates(arr, coords, order=3, mode="nearest",  # noqa: E731
                                             prefilter=False)
        t = ours_and_peers(c_pull3, {"scipy": scipy3}, repeat, slow=("scipy",))
        err = (c_pull3()[0, 0] - torch.from_numpy(scipy3())).abs().max().item()
        add("pull order 3", t["ours"], "scipy map_coordinates", t["scipy"], goal3(">= 5"),
            f"max diff {err:.1e}")
    # push
    push_peers = {}
    if interpol is not None:
        push_peers["torch-interpol push"] = lambda: interpol.grid_push(
            img, grid, shape, interpolation=1, bound="replicate", extrapolate=True)
    t = ours_and_peers(lambda: ops.grid_push(img, grid, shape, [1] * dim, rep, True),
                       push_peers, repeat, slow=tuple(push_peers))
    add("push order 1", t["ours"], "(pull order 1)", t_c1)
    for k in push_peers:
        add("push order 1", t["ours"], k, t[k], goal3(">= 10"))
    # the backward of pull: fused (one pass) against the two separate ops
    y = ops.grid_pull(img, grid, [1] * dim, rep, True)
    t = ours_and_peers(lambda: ops.grid_pull_backward(y, img, grid, [1] * dim, rep, True),
                       {"separate": lambda: (ops.grid_push(y, grid, shape, [1] * dim, rep, True),
                                             ops.grid_grad_dot(y, img, grid, [1] * dim, rep,
                                                               True))}, repeat)
    add("pull_backward order 1", t["ours"], "push + grad_dot", t["separate"], "",
        "fused vs separate")
    # forward + backward (image and grid)
    c_fb, gs_fb = fwd_bwd_pair(img, grid, mode)
    t = ours_and_peers(c_fb, {"peer": gs_fb}, repeat)
    add("pull order 1 fwd+bwd", t["ours"], "grid_sample fwd+bwd", t["peer"],
        goal3(">= 4", ">= 1.5"), "image and grid grads", ".2f")


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


def pair(ours, peer, repeat, threads=None):
    """(ours ms, peer ms), ours timed before and after the peer."""
    t = measure({"ours": ours, "peer": peer}, repeat=repeat, threads=threads, ours="ours")
    return t["ours"].best_ms, t["peer"].best_ms


def bench_issue11(size2, size3, repeat, rows):
    """Issue 11's deep-learning shapes: 1 thread, bicubic, a 2-D batch, 3-D with 8 channels."""
    img, grid = synthetic(size2, 2)
    tag = f"2-D {size2}^2"
    ours, peer, err = pull_pair(img, grid, 1, "bilinear")
    t_o, t_p = pair(ours, peer, repeat, threads=1)
    rows.append((tag, "pull order 1, 1 thread", f"{t_o:.2f}", "grid_sample, 1 thread",
                 f"{t_p:.2f}", f"{ratio(t_p, t_o):.2f}", ">= 1.5", f"max diff {err:.1e}"))
    ours, peer, err = pull_pair(img, grid, 3, "bicubic")
    t_o, t_p = pair(ours, peer, repeat)
    rows.append((tag, "pull order 3", f"{t_o:.2f}", "grid_sample bicubic", f"{t_p:.2f}",
                 f"{ratio(t_p, t_o):.2f}", ">= 1", "different splines (16 taps each)"))
    # a batch of 32 RGB 256^2 images, each with its own grid
    gen = torch.Generator().manual_seed(0)
    bimg = torch.randn(32, 3, 256, 256, generator=gen)
    _, g1 = synthetic(256, 2)
    bgrid = (g1 + torch.rand(32, 256, 256, 2, generator=gen) - 0.5).contiguous()
    tag = "2-D 256^2 x 32 x 3ch"
    ours, peer, err = pull_pair(bimg, bgrid, 1, "bilinear")
    t_o, t_p = pair(ours, peer, repeat)
    rows.append((tag, "pull order 1", f"{t_o:.1f}", "grid_sample", f"{t_p:.1f}",
                 f"{ratio(t_p, t_o):.2f}", ">= 2", f"max diff {err:.1e}"))
    ours, peer = fwd_bwd_pair(bimg, bgrid)
    t_o, t_p = pair(ours, peer, repeat)
    rows.append((tag, "pull order 1 fwd+bwd", f"{t_o:.1f}", "grid_sample fwd+bwd", f"{t_p:.1f}",
                 f"{ratio(t_p, t_o):.2f}", ">= 1.5", "image and grid grads"))
    del bimg, bgrid
    # 3-D, 8 channels: against grid_sample and against our own 1-channel time
    img1, grid3 = synthetic(size3, 3)
    img8, _ = synthetic(size3, 3, channels=8)
    tag = f"3-D {size3}^3 x 8ch"
    ours1, _, _ = pull_pair(img1, grid3, 1, "bilinear")
    ours, peer, err = pull_pair(img8, grid3, 1, "bilinear")
    t = measure({"ours": ours, "1 channel": ours1, "peer": peer}, repeat=repeat, ours="ours")
    t_1, t_o, t_p = (t[k].best_ms for k in ("1 channel", "ours", "peer"))
    rows.append((tag, "pull order 1", f"{t_o:.1f}", "grid_sample", f"{t_p:.1f}",
                 f"{ratio(t_p, t_o):.2f}", ">= 8", f"max diff {err:.1e}"))
    rows.append((tag, "pull order 1", f"{t_o:.1f}", "(ours, 1 channel)", f"{t_1:.1f}",
                 f"{ratio(t_o, t_1):.2f}", "<= 3", "ratio = 8ch / 1ch time"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--size3", type=int, default=128)
    ap.add_argument("--size2", type=int, default=512)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    ap.add_argument("--only-issue11", action="store_true",
                    help="only the 2-D 512^2 rows and issue 11's shapes")
    ap.add_argument("--record", metavar="FILE",
                    help="also write the table as a documentation record (docs/benchmarks/data)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    backend_for("pushpull", "cpu", require_compiled=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, "
          f"displacement +-2 voxels, min of {args.repeat} runs (ms; ours timed before and after "
          f"its peers); ratio = peer / nitorch_jit")
    rows = []
    if not args.only_issue11:
        bench_dim(3, args.size3, args.repeat, rows, not args.no_compile)
    bench_dim(2, args.size2, args.repeat, rows, not args.no_compile)
    bench_issue11(args.size2, args.size3, args.repeat, rows)
    headers = ["data", "op", "nitorch_jit C", "peer", "peer ms", "ratio", "goal", "note"]
    print_table(rows, headers)
    # the record writes ratios and goals as the pages read them: '11.3×', '≥ 4×'
    goal = lambda g: g.replace(">=", "≥").replace("<=", "≤") + "×" if g else g  # noqa: E731
    write_record(args.record, "Resampling, CPU", headers,
                 [(*r[:5], f"{r[5]}×", goal(r[6]), r[7]) for r in rows],
                 plot={"workload": [0, 1], "peer": 3, "ratio": 5, "goal": 6})


if __name__ == "__main__":
    main()
