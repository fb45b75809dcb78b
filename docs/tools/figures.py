"""The pictures of the user guides, made by code from data this script makes.

    python docs/tools/figures.py OUTDIR

The documentation build runs it (docs/conf.py) with ``NI_COMPILED_BACKEND=TORCH``: the
pure-PyTorch twin of every kernel gives the compiled kernels' results (held to 1e-10 in float64
by the tests), and a doc build then compiles nothing. Nothing is read from outside: the images
are drawn here, the NIfTI files of the reslice picture are written here with nibabel.
"""
import os
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import nitorch_jit as nj  # noqa: E402

ORDERS = (0, 1, 3, 5, 7)
BOUNDS = ("replicate", "dct1", "dct2", "dst1", "dst2", "dft", "zero")


def test_image(n=16):
    """A small 2-D image with an edge, a corner, a bright dot and a slope: every order and
    every bound shows on it."""
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    img = 0.25 * (j / (n - 1))                                  # a slope left to right
    img += ((i >= n // 4) & (i < 3 * n // 4) & (j >= n // 4) & (j < n // 2)).astype(float)
    img[n // 4: n // 2, n // 2: 3 * n // 4] += 0.5              # a step inside
    img[3 * n // 4 + 1, 3 * n // 4 + 1] = 1.5                   # a dot near a corner
    return torch.as_tensor(img, dtype=torch.float64)


def fine_grid(n, zoom, lo=0.0, hi=None):
    """Voxel coordinates of a grid `zoom` times finer over [lo, hi] in both dims."""
    hi = n - 1 if hi is None else hi
    t = torch.linspace(lo, hi, int(round((hi - lo) * zoom)) + 1, dtype=torch.float64)
    return torch.stack(torch.meshgrid(t, t, indexing="ij"), -1)


def show(ax, img, title, **kw):
    ax.imshow(np.asarray(img), cmap=kw.pop("cmap", "gray"), interpolation="nearest", **kw)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def orders(out):
    """A 16 x 16 image pulled on a grid 8 times finer at orders 0, 1, 3, 5, 7, and a profile."""
    img = test_image()
    grid = fine_grid(img.shape[0], 8)
    fig, axes = plt.subplots(1, len(ORDERS) + 1, figsize=(13, 2.9),
                             gridspec_kw={"width_ratios": [1] * len(ORDERS) + [1.6]})
    row = grid.shape[0] * 5 // 8
    for ax, order in zip(axes, ORDERS):
        # prefilter=True: the spline interpolates the voxel values (orders 2 and up need it)
        res = nj.grid_pull(img[None, None], grid[None], interpolation=order, bound="dct2",
                           prefilter=True)[0, 0]
        show(ax, res, f"order {order}", vmin=-0.2, vmax=1.6)
        ax.axhline(row, color="tab:orange", lw=0.6)
        axes[-1].plot(grid[row, :, 1], res[row], lw=1, label=f"order {order}")
    axes[-1].plot(np.arange(img.shape[1]), img[round(float(grid[row, 0, 0]))], "k.",
                  label="voxels")
    axes[-1].set_title("the orange row", fontsize=9)
    axes[-1].legend(fontsize=7, ncol=2)
    axes[-1].tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(out / "orders.png", dpi=90)
    plt.close(fig)


def bounds(out):
    """The seven bounds: one image pulled, with extrapolation, over a field of view three times
    its own; the dashed square is the image."""
    img = test_image()
    n = img.shape[0]
    grid = fine_grid(n, 4, -n, 2 * n - 1)
    fig, axes = plt.subplots(1, len(BOUNDS), figsize=(14, 2.5))
    for ax, bound in zip(axes, BOUNDS):
        res = nj.grid_pull(img[None, None], grid[None], interpolation=1, bound=bound,
                           extrapolate=True)[0, 0]
        show(ax, res, bound, cmap="RdBu_r", vmin=-1.6, vmax=1.6)
        k = grid.shape[0] / 3
        ax.add_patch(plt.Rectangle((k, k), k, k, fill=False, ls="--", lw=0.8, color="k"))
    fig.tight_layout()
    fig.savefig(out / "bounds.png", dpi=90)
    plt.close(fig)


def smooth_displacement(n, amplitude, seed=0):
    """A smooth random 2-D displacement [n, n, 2] in voxels: white noise resized from 4 x 4."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(1, 2, 4, 4, generator=g, dtype=torch.float64)
    field = nj.resize(coarse, shape=[n, n], interpolation=3, anchor="e")[0]
    return amplitude * field.movedim(0, -1) / field.abs().max()


def pull_push(out):
    """Pull against push: the same grid samples an image (pull) and splats values back (push);
    push is pull's adjoint, and push / count undoes the pull where the grid came."""
    img = test_image(32)
    n = img.shape[0]
    grid = nj.identity_grid([n, n], dtype=torch.float64) + smooth_displacement(n, 4.0)
    kw = dict(interpolation=1, bound="zero")
    pulled = nj.grid_pull(img[None, None], grid[None], **kw)
    pushed = nj.grid_push(pulled, grid[None], shape=[n, n], **kw)
    count = nj.grid_count(grid[None], shape=[n, n], **kw)
    # the adjoint identity <pull x, y> = <x, push y>, checked on random data
    x, y = torch.randn(1, 1, n, n, dtype=torch.float64), torch.randn(1, 1, n, n,
                                                                    dtype=torch.float64)
    lhs = float((nj.grid_pull(x, grid[None], **kw) * y).sum())
    rhs = float((x * nj.grid_push(y, grid[None], shape=[n, n], **kw)).sum())
    fig, axes = plt.subplots(1, 5, figsize=(13, 2.9))
    show(axes[0], img, "image x")
    show(axes[1], pulled[0, 0], "pull(x, grid)")
    show(axes[2], pushed[0, 0], "push(pull(x), grid)")
    show(axes[3], count[0, 0], "count(grid) = push(1)", cmap="viridis")
    ratio = torch.where(count > 0.5, pushed / count.clamp_min(1e-6), torch.zeros_like(count))
    show(axes[4], ratio[0, 0], "push / count")
    fig.suptitle(f"<pull x, y> = {lhs:.10f},  <x, push y> = {rhs:.10f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "pull_push.png", dpi=90)
    plt.close(fig)


def displacement(out):
    """A displacement field (arrows, every 4th voxel) and the image it warps, with the lines of
    a square lattice warped by the same field."""
    img = test_image(48)
    n = img.shape[0]
    disp = smooth_displacement(n, 5.0, seed=3)
    grid = nj.identity_grid([n, n], dtype=torch.float64) + disp
    warped = nj.grid_pull(img[None, None], grid[None], interpolation=3, bound="dct2",
                          extrapolate=True, prefilter=True)[0, 0]
    lattice = torch.zeros(n, n, dtype=torch.float64)
    lattice[::6, :] = lattice[:, ::6] = 1
    lattice_w = nj.grid_pull(lattice[None, None], grid[None], interpolation=1, bound="dct2",
                             extrapolate=True)[0, 0]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
    show(axes[0], img, "image and displacement")
    s = slice(None, None, 4)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    # grid[..., 0] indexes dim 0 (rows, the picture's y), grid[..., 1] dim 1 (columns, x)
    axes[0].quiver(j[s, s], i[s, s], disp[s, s, 1], disp[s, s, 0], color="tab:orange",
                   angles="xy", scale_units="xy", scale=1, width=0.006)
    show(axes[1], warped, "grid_pull(image, identity + displacement)")
    show(axes[2], lattice_w, "a lattice, warped the same way", cmap="gray_r")
    fig.tight_layout()
    fig.savefig(out / "displacement.png", dpi=90)
    plt.close(fig)


def phantom(shape, affine):
    """An ellipsoid with an off-centre sphere inside, in world (mm) space, sampled on a grid."""
    ijk = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1)
    xyz = ijk @ affine[:3, :3].T + affine[:3, 3]
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    body = ((x / 40) ** 2 + (y / 55) ** 2 + (z / 35) ** 2 <= 1).astype(np.float32)
    body += ((x - 12) ** 2 + (y + 20) ** 2 + z ** 2 <= 12 ** 2).astype(np.float32)
    body += 0.5 * ((np.abs(x + 15) < 6) & (np.abs(y - 15) < 18) & (np.abs(z) < 20))
    return body.astype(np.float32)


def rotation(degrees, axis=2):
    c, s = np.cos(np.radians(degrees)), np.sin(np.radians(degrees))
    r = np.eye(4)
    a, b = [k for k in range(3) if k != axis]
    r[a, a], r[a, b], r[b, a], r[b, b] = c, -s, s, c
    return r


def reslice_figure(out):
    """A moving image on its own tilted 2 mm grid, resliced onto a target's 1.5 mm grid."""
    import nibabel as nib
    moving_affine = rotation(25) @ np.diag([2.0, 2.0, 2.0, 1.0])
    moving_affine[:3, 3] = -moving_affine[:3, :3] @ (np.array([48, 64, 40]) - 1) / 2
    target_affine = np.diag([1.5, 1.5, 1.5, 1.0])
    target_shape = (72, 88, 56)
    target_affine[:3, 3] = -1.5 * (np.array(target_shape) - 1) / 2
    with tempfile.TemporaryDirectory() as tmp:
        moving_path = os.path.join(tmp, "moving.nii.gz")
        target_path = os.path.join(tmp, "target.nii.gz")
        nib.save(nib.Nifti1Image(phantom((48, 64, 40), moving_affine), moving_affine),
                 moving_path)
        nib.save(nib.Nifti1Image(phantom(target_shape, target_affine), target_affine),
                 target_path)
        resliced = nj.reslice(moving_path, target_path, order=3)
        moving = nib.load(moving_path).get_fdata()
        target = nib.load(target_path).get_fdata()
        after = np.asarray(resliced.dataobj)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
    show(axes[0], moving[:, :, moving.shape[2] // 2].T, "moving: its own 2 mm grid, tilted 25°",
         origin="lower", vmin=0, vmax=2.5)
    show(axes[1], target[:, :, target.shape[2] // 2].T, "target: 1.5 mm grid", origin="lower",
         vmin=0, vmax=2.5)
    show(axes[2], after[:, :, after.shape[2] // 2].T, "reslice(moving, target, order=3)",
         origin="lower", vmin=0, vmax=2.5)
    axes[2].contour(target[:, :, target.shape[2] // 2].T, levels=[0.5, 1.5],
                    colors="tab:orange", linewidths=0.6)
    fig.tight_layout()
    fig.savefig(out / "reslice.png", dpi=90)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python docs/tools/figures.py OUTDIR")
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    for make in (orders, bounds, pull_push, displacement, reslice_figure):
        make(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
