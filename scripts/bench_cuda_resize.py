"""GPU benchmark of the CUDA spline prefilter and resize kernels, ratios in one run.

    python scripts/bench_cuda_resize.py [--size 128] [--repeat 20] [--json FILE]

No speed goal is set for these ops on the GPU; the table shows where they stand against the
peers a GPU user has at hand, all on the same device in the same run:

- spline_coeff_nd order 3 (dct2) on a (2 * size)^3 volume: ours vs the pure-PyTorch twin
  (nitorch_jit.torch_impl, what NI_COMPILED_BACKEND=TORCH runs);
- resize x2, linear, edge anchor, no prefilter, size^3 -> (2 * size)^3: ours vs
  torch.nn.functional.interpolate(mode='trilinear', align_corners=False), the same operator
  (checked: the outputs agree);
- resize x2, cubic, edge anchor, prefilter: ours vs the twin;
- restrict (the adjoint) of that resize, (2 * size)^3 -> size^3: ours vs the twin.

Times are CUDA-event milliseconds, the minimum over --repeat runs after a warm-up (3 calls), ours
timed before and after its peer (nitorch_jit.bench.measure). The
effective bandwidth counts the input and output once. Exit status 0 (1 without a GPU).
"""
import sys

import torch
import torch.nn.functional as F

import nitorch_jit as nj
from nitorch_jit.bench import backend_for, measure, open_device, ratio
from nitorch_jit.bench.report import gpu_parser, print_table, write_json
from nitorch_jit.ops.options import bound_codes
from nitorch_jit.torch_impl import resize as twin_resize
from nitorch_jit.torch_impl import splinc as twin_splinc


def main():
    ap = gpu_parser(__doc__, size=128, repeat=20)
    args = ap.parse_args()
    dev, name = open_device(args.device, "bench_cuda_resize")
    kinds = {m: backend_for(m, dev) for m in ("splinc", "resize")}
    n, m = args.size, 2 * args.size
    torch.manual_seed(0)
    small = torch.randn(1, 1, n, n, n, device=dev)
    big = torch.randn(1, 1, m, m, m, device=dev)
    dct2 = bound_codes("dct2", 3)
    scale, shift = n / m, 0.5 * (n / m - 1)  # edge anchor, x2 (see nitorch_jit/ops/resize.py)
    geo = ([m] * 3, [scale] * 3, [shift] * 3)
    print(f"bench_cuda_resize: {name}, torch {torch.__version__}, "
          f"backends {kinds}, float32, {n}^3 <-> {m}^3")

    ours_lin = nj.resize(small, factor=2, anchor="e", interpolation=1, prefilter=False)
    ref_lin = F.interpolate(small, scale_factor=2, mode="trilinear", align_corners=False)
    err = (ours_lin - ref_lin).abs().max().item()
    print(f"check: resize linear edge vs F.interpolate trilinear: max |diff| {err:.2e}")

    cases = [
        ("spline_coeff_nd o3", m ** 3 * 2,
         lambda: nj.spline_coeff_nd(big, 3, "dct2", dim=3),
         {"torch twin": lambda: twin_splinc.spline_coeff_nd(big, [3] * 3, dct2, [2, 3, 4],
                                                             False)}),
        ("resize x2 o1 edge", (n ** 3 + m ** 3),
         lambda: nj.resize(small, factor=2, anchor="e", interpolation=1, prefilter=False),
         {"F.interpolate trilinear": lambda: F.interpolate(
             small, scale_factor=2, mode="trilinear", align_corners=False)}),
        ("resize x2 o3 edge prefilter", (n ** 3 + m ** 3),
         lambda: nj.resize(small, factor=2, anchor="e", interpolation=3),
         {"torch twin": lambda: twin_resize.resize(small, *geo, [3] * 3, dct2, True)}),
        ("restrict x2 o3 edge prefilter", (n ** 3 + m ** 3),
         lambda: nj.restrict(big, factor=2, anchor="e", interpolation=3),
         {"torch twin": lambda: twin_resize.resize_adjoint(
             big, [n] * 3, [scale] * 3, [shift] * 3, [3] * 3, dct2, True)}),
    ]
    rows, records = [], []
    for name, elems, ours, peers in cases:
        repeat = {"ours": args.repeat, **{p: max(3, args.repeat // 4) for p in peers}}
        res = measure({"ours": ours, **peers}, repeat=repeat, warmup=3, device=dev, ours="ours")
        t = res["ours"].best_ms
        gbs = elems * 4 / t / 1e6
        rows.append([name, "ours", f"{t:.3f}", f"{gbs:.0f}", ""])
        records.append({"case": name, "impl": "ours", "ms": t})
        for pname in peers:
            tp, r = res[pname].best_ms, ratio(res[pname], res["ours"])
            rows.append(["", pname, f"{tp:.3f}", "", f"{r:.2f}x"])
            records.append({"case": name, "impl": pname, "ms": tp, "ratio": r})
    print_table(rows, ["case", "impl", "ms", "GB/s", "peer/ours"])
    write_json(args.json, {"err_linear": err, "rows": records})
    return 0


if __name__ == "__main__":
    sys.exit(main())
