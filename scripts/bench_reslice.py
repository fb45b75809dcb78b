"""Speed of reslice against nibabel.processing.resample_from_to (scipy) and SimpleITK's
Resample, on one machine in one run, and of the command end to end (.nii.gz in and out).

Workload: a 256x256x176 float32 image (1 mm) resampled onto a target grid of the same size
rotated by 10 degrees about z and shifted by (3.3, -2.1, 1.7) mm, in memory. Each peer's rule
outside the moving image: against nibabel, scipy's 'reflect' = our dct2 with extrapolation;
SimpleITK writes 0 outside (its interpolators clamp at the edge), as reslice does by default
(extrapolate off), so that row runs ours without extrapolation and reports the agreement inside
the field of view (order 3: 3 voxels inside, beyond the reach of the boundary condition).

    python scripts/bench_reslice.py [--repeat 5] [--peer-repeat 2] [--threads 2]

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

SHAPE = (256, 256, 176)


def best(fn, repeat, warm=True):
    if warm:
        fn()  # first-use builds, caches
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def once(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def workload():
    rng = np.random.default_rng(0)
    # a smooth image with detail (sum of random low-frequency waves plus noise)
    axes = [np.linspace(0, 1, s, dtype=np.float32) for s in SHAPE]
    data = np.zeros(SHAPE, np.float32)
    for _ in range(4):
        f = rng.uniform(1, 8, 3)
        data += np.sin(f[0] * 6.28 * axes[0])[:, None, None] * \
            np.cos(f[1] * 6.28 * axes[1])[None, :, None] * np.sin(f[2] * 6.28 * axes[2])
    data += 0.1 * rng.standard_normal(SHAPE).astype(np.float32)
    data = np.asfortranarray(data)  # the layout nibabel reads from disk
    moving_aff = np.eye(4)
    moving_aff[:3, 3] = -(np.array(SHAPE) - 1) / 2
    t = np.deg2rad(10)
    rot = np.eye(4)
    rot[:2, :2] = [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]
    target_aff = rot @ moving_aff
    target_aff[:3, 3] += [3.3, -2.1, 1.7]
    return data, moving_aff, target_aff


def to_sitk(sitk, data, affine):
    """A SimpleITK image of an [X, Y, Z] array with a RAS affine (ITK is LPS)."""
    img = sitk.GetImageFromArray(np.ascontiguousarray(data.T))  # sitk arrays are [Z, Y, X]
    lps = np.diag([-1.0, -1.0, 1.0, 1.0]) @ affine
    spacing = np.sqrt((lps[:3, :3] ** 2).sum(0))
    img.SetSpacing(spacing.tolist())
    img.SetDirection((lps[:3, :3] / spacing).ravel().tolist())
    img.SetOrigin(lps[:3, 3].tolist())
    return img


def inside_fov(moving_aff, target_aff, margin=0):
    vox = np.linalg.inv(moving_aff) @ target_aff
    idx = np.stack(np.meshgrid(*[np.arange(s, dtype=np.float32) for s in SHAPE],
                               indexing="ij"), -1)
    c = idx @ vox[:3, :3].T.astype(np.float32) + vox[:3, 3].astype(np.float32)
    return ((c >= margin) & (c <= np.array(SHAPE) - 1 - margin)).all(-1)


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
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import nibabel as nib
    from nibabel.processing import resample_from_to
    import nitorch_jit as nj
    from nitorch_jit._reslice import run_cli

    data, moving_aff, target_aff = workload()
    moving = nib.Nifti1Image(data, moving_aff)
    target = (SHAPE, target_aff)
    # where SimpleITK and we both interpolate inside the image, away from the boundary
    # condition's reach (ITK's B-spline coefficients are mirrored, ours reflected: dct2)
    inside = {1: inside_fov(moving_aff, target_aff), 3: inside_fov(moving_aff, target_aff, 3)}
    rows = []  # (what, ours, peer, peer time, ratio, agreement, goal)
    # Each peer's semantics outside the moving image: nibabel with mode reflect extrapolates
    # (ours with extrapolate on); SimpleITK writes its default value 0 there, as reslice does by
    # default (extrapolate off).
    ours, ours_zero = {}, {}
    for order in (1, 3):
        for ex, into in ((True, ours), (False, ours_zero)):
            t, out = best(lambda: nj.reslice(moving, target, order=order, bound="dct2",
                                              extrapolate=ex, log=lambda s: None), args.repeat)
            into[order] = (t, out.get_fdata(dtype=np.float32))
            print(f"nitorch_jit order {order}, extrapolate {ex}: {t * 1e3:.0f} ms",
                  file=sys.stderr)
    for order in (1, 3):
        t, ref = best(lambda: resample_from_to(moving, target, order=order, mode="reflect"),
                      args.peer_repeat, warm=False)
        goal = "≥ 20×" if order == 3 else ""
        rows.append((f"order {order}, extrapolated", ours[order][0],
                     "nibabel resample_from_to (scipy), "
                     "mode reflect", t, goal, rel(ours[order][1], ref.get_fdata())))
        print(f"nibabel order {order}: {t:.2f} s", file=sys.stderr)
    try:
        import SimpleITK as sitk
    except ImportError:
        sitk = None
        print("SimpleITK not installed: its rows are skipped (pip install SimpleITK)",
              file=sys.stderr)
    if sitk is not None:
        sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
        smov, sref = to_sitk(sitk, data, moving_aff), to_sitk(sitk, np.zeros(SHAPE, np.float32),
                                                             target_aff)
        ident = sitk.Transform(3, sitk.sitkIdentity)
        for order, interp, name, goal in ((1, sitk.sitkLinear, "linear", "≥ 5×"),
                                          (3, sitk.sitkBSpline, "B-spline order 3", "≥ 20×")):
            def run():
                return sitk.Resample(smov, sref, ident, interp, 0.0, sitk.sitkFloat32)
            t, res = best(run, args.peer_repeat, warm=False)
            ref = sitk.GetArrayFromImage(res).T
            rows.append((f"order {order}, zero outside", ours_zero[order][0],
                         f"SimpleITK {sitk.Version.VersionString()} Resample, {name}, "
                         f"{args.threads} threads", t, goal,
                         rel(ours_zero[order][1], ref, inside[order])))
            print(f"SimpleITK {name}: {t:.2f} s", file=sys.stderr)

    print(f"\nreslice, {SHAPE[0]}x{SHAPE[1]}x{SHAPE[2]} float32, target rotated 10° and "
          f"shifted, torch {torch.__version__}, {args.threads} threads, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| order | nitorch_jit | peer | peer time | ratio | goal | max rel. difference |")
    print("|---|---|---|---|---|---|---|")
    for what, t, peer, pt, goal, diff in rows:
        print(f"| {what} | {t * 1e3:.0f} ms | {peer} | {pt:.3f} s | {pt / t:.1f}× | {goal} | "
              f"{diff:.1e} |")

    # the command end to end: read, resample, write
    with tempfile.TemporaryDirectory() as tmp:
        print("\ncommand end to end (`nitorch-jit reslice mov -t tgt --order 3 -o out`):\n")
        print("| files | total | read | resample | write |")
        print("|---|---|---|---|---|")
        for ext in (".nii.gz", ".nii"):
            mov, tgt = os.path.join(tmp, "mov" + ext), os.path.join(tmp, "tgt" + ext)
            nib.save(moving, mov)
            nib.save(nib.Nifti1Image(np.zeros(SHAPE, np.uint8), target_aff), tgt)
            lines = []
            ns = SimpleNamespace(moving=[mov], target=tgt, transforms=None, displacement=None,
                                 order=3, bound="dct2", extrapolate=False, label=False,
                                 dtype=None, device="cpu", output=os.path.join(tmp, "o" + ext),
                                 suffix="_resliced")
            total, _ = once(lambda: run_cli(ns, out=lines.append))
            part = lines[-1].split("(read ")[1].rstrip(")").replace(" s", "").split(", ")
            read, res, write = (float(x.split()[-1]) for x in part)
            print(f"| {ext} in and out | {total:.2f} s | {read:.2f} s | {res:.2f} s | "
                  f"{write:.2f} s |")
    print("\nnibabel writes .gz at zlib level 1 (its default, the fastest level); gzip "
          "(read + write) is the difference between the two rows.")


if __name__ == "__main__":
    main()
