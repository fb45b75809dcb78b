"""Speed of reslice against nibabel.processing.resample_from_to (scipy) and SimpleITK's
Resample, on one machine in one run, and of the command end to end (.nii.gz in and out).

Workload: a 256x256x176 float32 image (1 mm) resampled onto a target grid of the same size
rotated by 10 degrees about z and shifted by (3.3, -2.1, 1.7) mm, in memory. Each peer's rule
outside the moving image: against nibabel, scipy's 'reflect' = our dct2 with extrapolation;
SimpleITK writes 0 outside (its interpolators clamp at the edge), as reslice does by default
(extrapolate off), so that row runs ours without extrapolation and reports the agreement inside
the field of view (order 3: 3 voxels inside, beyond the reach of the boundary condition).

    python scripts/bench_reslice.py [--repeat 5] [--peer-repeat 2] [--threads 2] [--quick]

SimpleITK (pip install SimpleITK) is optional: its rows are skipped when it is absent.
"""
import argparse
import os
import sys
import tempfile
import time
from types import SimpleNamespace

import numpy as np
import torch

from nitorch_jit.bench import measure, ratio
from nitorch_jit.bench.data import RESLICE_SHAPE, reslice_workload
from nitorch_jit.bench.report import print_markdown

def to_sitk(sitk, data, affine):
    """A SimpleITK image of an [X, Y, Z] array with a RAS affine (ITK is LPS)."""
    img = sitk.GetImageFromArray(np.ascontiguousarray(data.T))  # sitk arrays are [Z, Y, X]
    lps = np.diag([-1.0, -1.0, 1.0, 1.0]) @ affine
    spacing = np.sqrt((lps[:3, :3] ** 2).sum(0))
    img.SetSpacing(spacing.tolist())
    img.SetDirection((lps[:3, :3] / spacing).ravel().tolist())
    img.SetOrigin(lps[:3, 3].tolist())
    return img


def inside_fov(shape, moving_aff, target_aff, margin=0):
    vox = np.linalg.inv(moving_aff) @ target_aff
    idx = np.stack(np.meshgrid(*[np.arange(s, dtype=np.float32) for s in shape],
                               indexing="ij"), -1)
    c = idx @ vox[:3, :3].T.astype(np.float32) + vox[:3, 3].astype(np.float32)
    return ((c >= margin) & (c <= np.array(shape) - 1 - margin)).all(-1)


def rel(a, b, mask=None):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if mask is not None:
        a, b = a[mask], b[mask]
    return np.abs(a - b).max() / np.abs(b).max()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="runs of ours (the best counts)")
    p.add_argument("--peer-repeat", type=int, default=2, help="runs of each peer")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: a 32x32x22 image, one run of each")
    args = p.parse_args()
    shape = tuple(s // 8 for s in RESLICE_SHAPE) if args.quick else RESLICE_SHAPE
    if args.quick:
        args.repeat = args.peer_repeat = 1
    torch.set_num_threads(args.threads)
    import nibabel as nib
    from nibabel.processing import resample_from_to
    import nitorch_jit as nj
    from nitorch_jit.io.reslice import gzip_compressor, run_cli

    data, moving_aff, target_aff = reslice_workload(shape)
    moving = nib.Nifti1Image(data, moving_aff)
    target = (shape, target_aff)
    # where SimpleITK and we both interpolate inside the image, away from the boundary
    # condition's reach (ITK's B-spline coefficients are mirrored, ours reflected: dct2)
    inside = {1: inside_fov(shape, moving_aff, target_aff),
              3: inside_fov(shape, moving_aff, target_aff, 3)}
    rows = []  # (what, ours, peer, peer time, ratio, agreement, goal)
    # Each peer's semantics outside the moving image: nibabel with mode reflect extrapolates
    # (ours with extrapolate on); SimpleITK writes its default value 0 there, as reslice does by
    # default (extrapolate off).
    ours, ours_zero = {}, {}
    for order in (1, 3):
        for ex, into in ((True, ours), (False, ours_zero)):
            t = measure(lambda: nj.reslice(moving, target, order=order, bound="dct2",
                                           extrapolate=ex, log=lambda s: None),
                        repeat=args.repeat, keep_result=True)
            into[order] = (t.best_ms, t.result.get_fdata(dtype=np.float32))
            print(f"nitorch_jit order {order}, extrapolate {ex}: {t.best_ms:.0f} ms",
                  file=sys.stderr)
    for order in (1, 3):
        t = measure(lambda: resample_from_to(moving, target, order=order, mode="reflect"),
                    repeat=args.peer_repeat, warmup=0, keep_result=True)
        goal = "≥ 20×" if order == 3 else ""
        rows.append((f"order {order}, extrapolated", ours[order][0],
                     "nibabel resample_from_to (scipy), "
                     "mode reflect", t.best_ms, goal, rel(ours[order][1], t.result.get_fdata())))
        print(f"nibabel order {order}: {t.best_ms / 1e3:.2f} s", file=sys.stderr)
    try:
        import SimpleITK as sitk
    except ImportError:
        sitk = None
        print("SimpleITK not installed: its rows are skipped (pip install SimpleITK)",
              file=sys.stderr)
    if sitk is not None:
        sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
        smov, sref = to_sitk(sitk, data, moving_aff), to_sitk(sitk, np.zeros(shape, np.float32),
                                                             target_aff)
        ident = sitk.Transform(3, sitk.sitkIdentity)
        for order, interp, name, goal in ((1, sitk.sitkLinear, "linear", "≥ 5×"),
                                          (3, sitk.sitkBSpline, "B-spline order 3", "≥ 20×")):
            def run():
                return sitk.Resample(smov, sref, ident, interp, 0.0, sitk.sitkFloat32)
            t = measure(run, repeat=args.peer_repeat, warmup=0, keep_result=True)
            ref = sitk.GetArrayFromImage(t.result).T
            rows.append((f"order {order}, zero outside", ours_zero[order][0],
                         f"SimpleITK {sitk.Version.VersionString()} Resample, {name}, "
                         f"{args.threads} threads", t.best_ms, goal,
                         rel(ours_zero[order][1], ref, inside[order])))
            print(f"SimpleITK {name}: {t.best_ms / 1e3:.2f} s", file=sys.stderr)

    print(f"\nreslice, {shape[0]}x{shape[1]}x{shape[2]} float32, target rotated 10° and "
          f"shifted, torch {torch.__version__}, {args.threads} threads, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print_markdown([(what, f"{t:.0f} ms", peer, f"{pt / 1e3:.3f} s", f"{ratio(pt, t):.1f}×", goal,
                     f"{diff:.1e}") for what, t, peer, pt, goal, diff in rows],
                   ["order", "nitorch_jit", "peer", "peer time", "ratio", "goal",
                    "max rel. difference"])

    # the command end to end: read, resample, write; against nibabel + scipy doing the same
    with tempfile.TemporaryDirectory() as tmp:
        print("\ncommand end to end (`nitorch-jit reslice mov -t tgt --order 3 -o out`) against "
              "nibabel load + resample_from_to (scipy, order 3) + save:\n")
        rows = []
        libs = [name for name in ("isal", "zlib-ng", "zlib") if _has_deflate(name)]
        for ext in (".nii.gz", ".nii"):
            mov, tgt = os.path.join(tmp, "mov" + ext), os.path.join(tmp, "tgt" + ext)
            nib.save(moving, mov)
            nib.save(nib.Nifti1Image(np.zeros(shape, np.uint8), target_aff), tgt)

            def peer():
                img = nib.load(mov)
                nib.save(resample_from_to(img, (shape, target_aff), order=3),
                         os.path.join(tmp, "peer" + ext))
            peer_ms = measure(peer, repeat=args.peer_repeat, warmup=0).best_ms
            for lib in (libs if ext == ".nii.gz" else ["-"]):
                os.environ["NI_JIT_GZIP"] = lib if lib != "-" else "zlib"
                lines = []
                ns = SimpleNamespace(moving=[mov], target=tgt, transforms=None,
                                     displacement=None, order=3, bound="dct2",
                                     extrapolate=False, label=False, dtype=None, device="cpu",
                                     output=os.path.join(tmp, "o" + ext), suffix="_resliced")
                total = measure(lambda: run_cli(ns, out=lines.append), repeat=args.repeat,
                                warmup=1).best_ms
                part = lines[-1].split("(read ")[1].rstrip(")").replace(" s", "").split(", ")
                read, res, write = (float(x.split()[-1]) for x in part)
                rows.append((f"{ext} in and out" + (f", {lib}" if lib != "-" else ""),
                             f"{total / 1e3:.2f} s", f"{read:.2f} s", f"{res:.2f} s",
                             f"{write:.2f} s", f"{peer_ms / 1e3:.2f} s",
                             f"{ratio(peer_ms, total):.1f}×"))
            os.environ.pop("NI_JIT_GZIP", None)
        print_markdown(rows, ["files, deflate", "total", "read", "resample", "write",
                              "nibabel + scipy", "ratio"])
    print(f"\nThe deflate used by default here: {gzip_compressor()[0]}. nibabel reads .gz with "
          "Python's gzip and writes at zlib level 1; reslice writes level-1 gzip members in "
          "parallel.")


def _has_deflate(name):
    import importlib.util
    return name == "zlib" or importlib.util.find_spec(name.replace("-", "_")) is not None

if __name__ == "__main__":
    main()
