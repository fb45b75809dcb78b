"""reslice (nitorch_jit.reslice, `nitorch-jit reslice`): against nibabel's resample_from_to
(scipy), and each transform format on transforms whose result is known by construction."""
import doctest
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

nib = pytest.importorskip("nibabel")
from nibabel.processing import resample_from_to  # noqa: E402

import nitorch_jit as nj  # noqa: E402
from nitorch_jit.io import reslice as _reslice, transforms  # noqa: E402
from nitorch_jit.cli import main  # noqa: E402


def _rng(seed=0):
    return np.random.default_rng(seed)


def _rotation_z(degrees):
    t = np.deg2rad(degrees)
    m = np.eye(4)
    m[:2, :2] = [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]
    return m


def _oblique_pair(dtype=np.float64, extra=()):
    """A moving image with anisotropic voxels and a target grid rotated by 10 degrees."""
    data = _rng().standard_normal((20, 24, 18) + extra).astype(dtype)
    aff = np.diag([1.2, 1.0, 0.9, 1.0])
    aff[:3, 3] = [-10, -12, -8]
    target_aff = _rotation_z(10) @ np.diag([1.1, 1.05, 1.0, 1.0])
    target_aff[:3, 3] = [-9, -11, -7]
    return nib.Nifti1Image(data, aff), ((18, 22, 16), target_aff)


def _rel(a, b):
    return np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max()


# ----------------------------------------------------------------------------- oracle: nibabel
# scipy's modes and our bounds: mirror = dct1, reflect = dct2, grid-wrap = dft, each with the
# spline prefilter of the same boundary (nitorch_jit.ndimage's table), extrapolating
@pytest.mark.parametrize("order", [0, 1, 3])
@pytest.mark.parametrize("mode,bound", [("mirror", "dct1"), ("reflect", "dct2"),
                                        ("grid-wrap", "dft")])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_nibabel(order, mode, bound, dtype):
    moving, target = _oblique_pair(dtype)
    ref = resample_from_to(moving, target, order=order, mode=mode).get_fdata()
    out = nj.reslice(moving, target, order=order, bound=bound, extrapolate=True)
    assert out.shape == target[0]
    np.testing.assert_allclose(out.affine, target[1])
    assert out.get_data_dtype() == dtype
    assert _rel(out.get_fdata(), ref) < 1e-5


@pytest.mark.parametrize("order", [1, 3])
@pytest.mark.parametrize("kernel", ["grid", "affine_pull"])
def test_both_kernels_match_nibabel(order, kernel, monkeypatch):
    """The affine case goes to affine_pull (grid-free); with a displacement field (here zero)
    through a grid in chunks: both checked."""
    calls = []
    real = _reslice.affine_pull_codes
    monkeypatch.setattr(_reslice, "affine_pull_codes",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    moving, target = _oblique_pair(np.float32)
    displacement = None
    if kernel == "grid":
        monkeypatch.setattr(_reslice, "_CHUNK_POINTS", 1000)  # several chunks
        displacement = nib.Nifti1Image(np.zeros(target[0] + (3,), np.float32), target[1])
    ref = resample_from_to(moving, target, order=order, mode="reflect").get_fdata()
    out = nj.reslice(moving, target, displacement=displacement, order=order,
                     extrapolate=True).get_fdata()
    assert _rel(out, ref) < 1e-5
    assert len(calls) == (kernel == "affine_pull")


@pytest.mark.parametrize("order", [0, 1, 3])
def test_matches_nibabel_constant(order):
    """scipy's 'constant' gives cval outside [0, n-1]; ours 0 outside [-0.05, n-1+0.05]: the
    same wherever a point is not in that thin band."""
    moving, (shape, taff) = _oblique_pair()
    ref = resample_from_to(moving, (shape, taff), order=order, mode="constant").get_fdata()
    out = nj.reslice(moving, (shape, taff), order=order, bound="dct1").get_fdata()
    vox = np.linalg.inv(moving.affine) @ taff
    idx = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1)
    coords = idx @ vox[:3, :3].T + vox[:3, 3]
    n = np.array(moving.shape) - 1
    band = ((coords < 0) & (coords >= -0.05)) | ((coords > n) & (coords <= n + 0.05))
    keep = ~band.any(-1)
    assert keep.mean() > 0.9 and (ref[keep] == 0).mean() > 0.05  # both regions exercised
    assert _rel(out[keep], ref[keep]) < 1e-5


def test_4d_batched_matches_nibabel_per_volume():
    moving, target = _oblique_pair(np.float32, extra=(3,))
    out = nj.reslice(moving, target, order=3, bound="dct2", extrapolate=True).get_fdata()
    assert out.shape == target[0] + (3,)
    for t in range(3):
        vol = nib.Nifti1Image(moving.get_fdata()[..., t], moving.affine)
        ref = resample_from_to(vol, target, order=3, mode="reflect").get_fdata()
        assert _rel(out[..., t], ref) < 1e-5


def test_5d_vector_image_keeps_its_layout():
    data = _rng().standard_normal((6, 7, 8, 1, 3)).astype(np.float32)
    moving = nib.Nifti1Image(data, np.eye(4))
    out = nj.reslice(moving, ((6, 7, 8), np.eye(4)))
    assert out.shape == (6, 7, 8, 1, 3)
    np.testing.assert_allclose(out.get_fdata(), data, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- known results
def _cube(n=8, seed=1, dtype=np.float32, centred=True):
    data = _rng(seed).standard_normal((n, n, n)).astype(dtype)
    aff = np.eye(4)
    if centred:
        aff[:3, 3] = -(n - 1) / 2  # world origin at the centre: flips and rotations map the
    return nib.Nifti1Image(data, aff)   # grid onto itself


def _write(path, text):
    path.write_text(text)
    return str(path)


def _plain(tmp_path, mat, name="m.txt"):
    return _write(tmp_path / name, "\n".join(" ".join(f"{v:.17g}" for v in row)
                                             for row in np.asarray(mat)) + "\n")


def _vg_lines(shape, aff):
    """An LTA volume info block for the geometry (shape, vox2ras)."""
    lin = aff[:3, :3]
    size = np.sqrt((lin ** 2).sum(0))
    mdc = lin / size
    cras = aff[:3, :3] @ (np.array(shape) / 2) + aff[:3, 3]
    fmt = lambda v: " ".join(f"{x:.15e}" for x in v)  # noqa: E731
    return (f"valid = 1  # volume info valid\nfilename = vol.nii.gz\n"
            f"volume = {shape[0]} {shape[1]} {shape[2]}\nvoxelsize = {fmt(size)}\n"
            f"xras   = {fmt(mdc[:, 0])}\nyras   = {fmt(mdc[:, 1])}\nzras   = {fmt(mdc[:, 2])}\n"
            f"cras   = {fmt(cras)}\n")


def _lta(tmp_path, mat, kind=1, src=None, dst=None, name="t.lta"):
    rows = "\n".join(" ".join(f"{v:.15e}" for v in row) for row in mat)
    kind_name = {0: "LINEAR_VOX_TO_VOX", 1: "LINEAR_RAS_TO_RAS"}.get(kind, "OTHER")
    text = (f"# transform file {name}\n# created by the tests\ntype      = {kind} # {kind_name}\n"
            f"nxforms   = 1\nmean      = 0.0000 0.0000 0.0000\nsigma     = 1.0000\n1 4 4\n"
            f"{rows}\n")
    text += "src volume info\n" + (_vg_lines(*src) if src else "valid = 0  # volume info invalid\n")
    text += "dst volume info\n" + (_vg_lines(*dst) if dst else "valid = 0  # volume info invalid\n")
    text += "subject unknown\nfscale 0.100000\n"
    return _write(tmp_path / name, text)


def _itk(tmp_path, lin, trans=(0, 0, 0), centre=(0, 0, 0), name="t.txt",
         kind="AffineTransform_double_3_3"):
    params = " ".join(f"{v:.17g}" for v in list(np.ravel(lin)) + list(trans))
    return _write(tmp_path / name, f"#Insight Transform File V1.0\n#Transform 0\n"
                  f"Transform: {kind}\nParameters: {params}\n"
                  f"FixedParameters: {' '.join(f'{v:.17g}' for v in centre)}\n")


def _same_grid(img):
    return (img.shape[:3], img.affine)


def _shift(n):
    m = np.eye(4)
    m[0, 3] = n
    return m


def test_identity_all_formats(tmp_path):
    img = _cube()
    for t in [_plain(tmp_path, np.eye(4)), _lta(tmp_path, np.eye(4)),
              _itk(tmp_path, np.eye(3)), _lta(tmp_path, np.eye(4), kind=0, name="v.lta",
                                              src=_same_grid(img), dst=_same_grid(img))]:
        out = nj.reslice(img, _same_grid(img), [t], order=3)
        np.testing.assert_allclose(out.get_fdata(), img.get_fdata(), atol=1e-5, err_msg=t)


def test_integer_shift(tmp_path):
    """moving -> target by +2 mm along x (1 mm voxels): out[i] = in[i - 2], 0 where i < 2."""
    img = _cube(centred=False)
    data = img.get_fdata()
    want = np.zeros_like(data)
    want[2:] = data[:-2]
    # ITK maps target -> moving in LPS: x_m = x_t - 2 (RAS) is +2 along L
    for t in [_plain(tmp_path, _shift(2)), _lta(tmp_path, _shift(2)),
              _itk(tmp_path, np.eye(3), trans=(2, 0, 0))]:
        for order in (0, 1, 3):
            out = nj.reslice(img, _same_grid(img), [t], order=order)
            np.testing.assert_allclose(out.get_fdata(), want, atol=1e-5, err_msg=f"{t} {order}")


def test_axis_flip(tmp_path):
    img = _cube()
    want = img.get_fdata()[::-1]
    flip = np.diag([-1.0, 1, 1, 1])
    for t in [_plain(tmp_path, flip), _lta(tmp_path, flip), _itk(tmp_path, flip[:3, :3])]:
        out = nj.reslice(img, _same_grid(img), [t], order=3)
        np.testing.assert_allclose(out.get_fdata(), want, atol=1e-5, err_msg=t)


def test_rotation_90(tmp_path):
    """+90 degrees about z, moving -> target: out[i, j] = in[j, n-1-i] (numpy's rot90)."""
    img = _cube()
    rot = _rotation_z(90).round()
    want = np.rot90(img.get_fdata(), 1, axes=(0, 1))
    for t in [_plain(tmp_path, rot), _lta(tmp_path, rot)]:
        out = nj.reslice(img, _same_grid(img), [t], order=1)
        np.testing.assert_allclose(out.get_fdata(), want, atol=1e-5, err_msg=t)


def test_itk_centre_convention(tmp_path):
    """An ITK rotation about its centre (FixedParameters), on a grid whose origin is not
    the centre: target -> moving by +90 degrees about the image centre is numpy's rot90 k=-1."""
    n = 8
    img = _cube(n, centred=False)
    c = (n - 1) / 2
    lin = _rotation_z(90).round()[:3, :3]  # about z: the same matrix in LPS and RAS
    t = _itk(tmp_path, lin, centre=(-c, -c, c))  # the centre in LPS
    want = np.rot90(img.get_fdata(), -1, axes=(0, 1))
    out = nj.reslice(img, _same_grid(img), [t], order=1)
    np.testing.assert_allclose(out.get_fdata(), want, atol=1e-5)
    t2 = _itk(tmp_path, lin, centre=(-c, -c, c), name="m.txt",
              kind="MatrixOffsetTransformBase_double_3_3")
    np.testing.assert_allclose(nj.reslice(img, _same_grid(img), [t2], order=1).get_fdata(),
                               want, atol=1e-5)


def test_header_only_voxel_size_change(tmp_path):
    """The same array with 2 mm voxels in its header: the RAS-to-RAS transform between the
    two headers (a scaling), or the identity voxel-to-voxel LTA, gives the array back."""
    img = _cube(centred=False)
    target_aff = np.diag([2.0, 2.0, 2.0, 1.0])
    target = (img.shape, target_aff)
    scale = target_aff @ np.linalg.inv(img.affine)
    for t in [_plain(tmp_path, scale), _lta(tmp_path, scale),
              _lta(tmp_path, np.eye(4), kind=0, name="v.lta", src=_same_grid(img), dst=target),
              _itk(tmp_path, np.linalg.inv(scale)[:3, :3])]:
        out = nj.reslice(img, target, [t], order=3)
        np.testing.assert_allclose(out.get_fdata(), img.get_fdata(), atol=1e-5, err_msg=t)


def test_lta_running_the_other_way_is_inverted(tmp_path):
    img = _cube(centred=False)
    target_img = nib.Nifti1Image(np.zeros((8, 8, 8), np.float32), _shift(-30))
    forward = _lta(tmp_path, _shift(2), src=_same_grid(img), dst=_same_grid(target_img))
    backward = _lta(tmp_path, _shift(-2), src=_same_grid(target_img), dst=_same_grid(img),
                    name="b.lta")
    notes = []
    ref = nj.reslice(img, target_img, [forward], log=notes.append)
    assert notes == []
    out = nj.reslice(img, target_img, [backward], log=notes.append)
    assert len(notes) == 1 and "inverted" in notes[0]
    np.testing.assert_allclose(out.get_fdata(), ref.get_fdata(), atol=1e-6)
    with pytest.warns(UserWarning, match="inverted"):
        nj.reslice(img, target_img, [backward])


def test_round_trip_through_inverse(tmp_path):
    img = _cube(centred=True)
    mat = _rotation_z(17) @ _shift(1.3)
    mat[1, 3] = -0.7
    for t in [_plain(tmp_path, mat), _lta(tmp_path, mat),
              _itk(tmp_path, mat[:3, :3], trans=(1, 2, 3), centre=(0.5, 0, -1))]:
        # composed in one call: the identity, exactly
        out = nj.reslice(img, _same_grid(img), [t, (t, True)], order=3)
        np.testing.assert_allclose(out.get_fdata(), img.get_fdata(), atol=1e-5, err_msg=t)
    # in two calls on a smooth image: close in the interior
    x = np.linspace(-1, 1, 24)
    smooth = np.cos(2 * x)[:, None, None] * np.sin(1.5 * x)[None, :, None] \
        * np.cos(x)[None, None, :]
    aff = np.eye(4)
    aff[:3, 3] = -11.5
    simg = nib.Nifti1Image(smooth, aff)
    t = _plain(tmp_path, mat)
    there = nj.reslice(simg, _same_grid(simg), [t], order=3, extrapolate=True)
    back = nj.reslice(there, _same_grid(simg), [(t, True)], order=3, extrapolate=True)
    inner = (slice(6, -6),) * 3
    assert np.abs(back.get_fdata()[inner] - smooth[inner]).max() < 1e-3


def test_transforms_compose_in_order(tmp_path):
    """-l A -l B moves the moving image by A then B: rot90 then a shift is not a shift then
    rot90; checked against the product of the matrices."""
    img = _cube()
    rot, sh = _rotation_z(90).round(), _shift(2)
    a, b = _plain(tmp_path, rot, "a.txt"), _plain(tmp_path, sh, "b.txt")
    out = nj.reslice(img, _same_grid(img), [a, b], order=1).get_fdata()
    ref = nj.reslice(img, _same_grid(img), [sh @ rot], order=1).get_fdata()
    other = nj.reslice(img, _same_grid(img), [rot @ sh], order=1).get_fdata()
    np.testing.assert_allclose(out, ref, atol=1e-6)
    assert np.abs(out - other).max() > 0.1


def test_displacement_field(tmp_path):
    """A constant field of +2 mm along L (LPS) takes target x to x - 2 (RAS): out[i] =
    in[i - 2]; the same field on a coarser grid of its own gives the same."""
    img = _cube(centred=False)
    data = img.get_fdata()
    want = np.zeros_like(data)
    want[2:] = data[:-2]
    field = np.zeros((8, 8, 8, 1, 3), np.float32)
    field[..., 0] = 2
    path = str(tmp_path / "warp.nii.gz")
    nib.save(nib.Nifti1Image(field, img.affine), path)
    out = nj.reslice(img, _same_grid(img), displacement=path, bound="zero")
    np.testing.assert_allclose(out.get_fdata(), want, atol=1e-5)
    coarse = nib.Nifti1Image(np.full((5, 5, 5, 3), [2, 0, 0], np.float32),
                             np.diag([2.0, 2, 2, 1]))  # [X, Y, Z, 3] accepted too
    out = nj.reslice(img, _same_grid(img), displacement=coarse, bound="zero")
    np.testing.assert_allclose(out.get_fdata(), want, atol=1e-5)
    # then an affine: the field first (on target points), the affine after
    out = nj.reslice(img, _same_grid(img), [_shift(2)], displacement=path, bound="zero")
    want4 = np.zeros_like(data)
    want4[4:] = data[:-4]
    np.testing.assert_allclose(out.get_fdata(), want4, atol=1e-5)


def test_labels(tmp_path):
    data = np.full((8, 8, 8), 3, np.int16)
    data[4:] = 7
    data[2:4, 2:6] = 5
    img = nib.Nifti1Image(data, np.eye(4))
    out = nj.reslice(img, _same_grid(img), [_shift(2)], label=True, bound="zero")
    assert out.get_data_dtype() == np.int16
    got = np.asarray(out.dataobj)
    np.testing.assert_array_equal(got[2:], data[:-2])
    assert (got[:2] == 0).all()  # outside the field of view: 0, not the smallest label
    # order 0 labels on an oblique grid: nibabel's nearest neighbour where both are inside
    moving, target = _oblique_pair()
    lab = nib.Nifti1Image((np.abs(moving.get_fdata()) * 3).astype(np.int32), moving.affine)
    ours = np.asarray(nj.reslice(lab, target, order=0, label=True, bound="dct1").dataobj)
    ref = np.asarray(resample_from_to(lab, target, order=0, mode="constant").dataobj)
    assert (ours == ref).mean() > 0.98


def test_nearest_labels_equal_the_label_pull():
    """Order-0 labels take one pull of the values: the same labels as grid_pull's mask per
    label (its label path), with 0 outside the field of view."""
    from nitorch_jit.ops.pushpull import affine_grid, grid_pull
    lab = (_rng(3).integers(0, 40, (6, 6, 5)) + 3).repeat(3, 0).repeat(3, 1).repeat(3, 2)
    vox = _rotation_z(10)
    vox[:3, 3] = [1.3, -2.2, 0.4]
    img = nib.Nifti1Image(lab.astype(np.int16), np.eye(4))
    fast = np.asarray(nj.reslice(img, (lab.shape, vox), label=True, order=0).dataobj)
    rev = _reslice._REVERSE
    grid = affine_grid(torch.as_tensor(rev @ vox @ rev, dtype=torch.float32), lab.shape[::-1])
    masks = grid_pull(torch.from_numpy(np.ascontiguousarray(lab.T))[None, None], grid[None],
                      0, "dct2")[0, 0]
    inside = grid_pull(torch.ones((1, 1) + lab.shape[::-1]), grid[None], 0, "dct2")[0, 0]
    want = torch.where(inside == 0, 0, masks).numpy().T
    assert (want == 0).mean() > 0.05
    np.testing.assert_array_equal(fast, want)


def test_dtype_rounds_and_clips():
    data = np.array([-300.6, -2.5, -0.4, 0.5, 2.5, 1e6], np.float32).reshape(6, 1, 1)
    img = nib.Nifti1Image(data, np.eye(4))
    out = nj.reslice(img, _same_grid(img), dtype="int16")
    assert out.get_data_dtype() == np.int16
    np.testing.assert_array_equal(np.asarray(out.dataobj).ravel(),
                                  [-301, -3, 0, 1, 3, 32767])


def test_scaled_integer_input_keeps_values(tmp_path):
    data = (_rng().standard_normal((6, 6, 6)) * 100).astype(np.int16)
    img = nib.Nifti1Image(data, np.eye(4))
    img.header.set_slope_inter(0.5, 10)
    path = str(tmp_path / "scaled.nii")
    nib.save(img, path)
    out = nj.reslice(path, _same_grid(img), output=str(tmp_path / "o.nii"))
    back = nib.load(str(tmp_path / "o.nii"))
    assert back.get_data_dtype() == np.int16
    np.testing.assert_allclose(back.get_fdata(), data * 0.5 + 10, atol=0.02)
    np.testing.assert_allclose(out.get_fdata(), data * 0.5 + 10, atol=1e-4)


# ----------------------------------------------------------------------------- command line
def _save(img, path):
    nib.save(img, str(path))
    return str(path)


def test_cli_writes_on_target_grid(tmp_path, capsys):
    moving, (shape, taff) = _oblique_pair(np.float32)
    mov = _save(moving, tmp_path / "mov.nii.gz")
    tgt = _save(nib.Nifti1Image(np.zeros(shape, np.uint8), taff), tmp_path / "tgt.nii.gz")
    other = _save(nib.MGHImage(moving.get_fdata().astype(np.float32), moving.affine),
                  tmp_path / "other.mgz")
    assert main(["reslice", mov, other, "-t", tgt, "--order", "3", "--bound", "reflect",
                 "--extrapolate"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(" s (read " in ln for ln in lines)
    ref = resample_from_to(moving, (shape, taff), order=3, mode="reflect").get_fdata()
    for name in ("mov_resliced.nii.gz", "other_resliced.mgz"):
        out = nib.load(str(tmp_path / name))
        assert out.shape == shape and out.get_data_dtype().newbyteorder("=") == np.float32
        np.testing.assert_allclose(out.affine, taff, atol=1e-5)
        assert _rel(out.get_fdata(), ref) < 1e-5
    assert isinstance(nib.load(str(tmp_path / "other_resliced.mgz")), nib.MGHImage)
    assert not [p for p in os.listdir(tmp_path) if "partial" in p]


def test_nifti2_stays_nifti2(tmp_path):
    img = _cube()
    mov = _save(nib.Nifti2Image(img.get_fdata().astype(np.float32), img.affine),
                tmp_path / "n2.nii")
    out = str(tmp_path / "o.nii")
    nj.reslice(mov, mov, output=out)
    back = nib.load(out)
    assert isinstance(back, nib.Nifti2Image)
    np.testing.assert_allclose(back.get_fdata(), img.get_fdata(), atol=1e-6)


def test_cli_inverse_and_output(tmp_path):
    img = _cube()
    mov = _save(img, tmp_path / "mov.nii")
    t = _plain(tmp_path, _rotation_z(90).round())
    out = str(tmp_path / "out.nii.gz")
    assert main(["reslice", mov, "-t", mov, "-l", t, "-l", t, "--inverse", "-o", out]) == 0
    np.testing.assert_allclose(nib.load(out).get_fdata(), img.get_fdata(), atol=1e-5)
    with pytest.raises(SystemExit):
        main(["reslice", mov, "-t", mov, "--inverse", "-l", t])


@pytest.mark.parametrize("case", ["missing", "badline", "singular", "field", "folder",
                                  "type", "lta_type", "two_outputs", "bound", "dtype",
                                  "device"])
def test_cli_bad_input_writes_nothing(tmp_path, capsys, case):
    img = _cube()
    mov = _save(img, tmp_path / "mov.nii.gz")
    args = ["reslice", mov, "-t", mov]
    expect = {"missing": "nothere.nii.gz: file not found", "badline": "line 2",
              "singular": "singular", "field": "fits no displacement layout",
              "folder": "does not exist", "type": "not supported",
              "lta_type": "LTA type 2", "two_outputs": "use --suffix",
              "bound": "bound: unknown bound 'sideways'", "dtype": "dtype: unknown",
              "device": "device: "}[case]
    if case == "missing":
        args = ["reslice", str(tmp_path / "nothere.nii.gz"), "-t", mov]
    elif case == "badline":
        args += ["-l", _write(tmp_path / "bad.txt", "1 0 0 0\n0 1 x 0\n0 0 1 0\n0 0 0 1\n")]
    elif case == "singular":
        args += ["-l", _plain(tmp_path, np.diag([1.0, 0, 1, 1]))]
    elif case == "field":
        args += ["-d", _save(nib.Nifti1Image(np.zeros((8, 8, 8, 2), np.float32), np.eye(4)),
                             tmp_path / "f.nii.gz")]
    elif case == "folder":
        args += ["-o", str(tmp_path / "no" / "out.nii.gz")]
    elif case == "type":
        args += ["-l", _itk(tmp_path, np.eye(3), kind="Euler3DTransform_double_3_3")]
    elif case == "lta_type":
        args += ["-l", _lta(tmp_path, np.eye(4), kind=2)]
    elif case == "two_outputs":
        args = ["reslice", mov, mov, "-t", mov, "-o", str(tmp_path / "o.nii")]
    elif case == "bound":
        args += ["--bound", "sideways"]
    elif case == "dtype":
        args += ["--dtype", "float17"]
    elif case == "device":
        args += ["--device", "cuda" if not torch.cuda.is_available() else "tpu"]
    before = sorted(os.listdir(tmp_path))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert expect in err, err
    assert sorted(os.listdir(tmp_path)) == before


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    img = _cube()
    real_save, real_gzip = nib.save, _reslice._write_gzip

    def fail_after(write):
        def wrapped(what, path):
            write(what, path)  # a complete temporary file, then the disk fills up
            raise OSError(28, "No space left on device")
        return wrapped
    monkeypatch.setattr(nib, "save", fail_after(real_save))
    monkeypatch.setattr(_reslice, "_write_gzip", fail_after(real_gzip))
    for name in ("o.nii", "o.nii.gz", "o.mgz"):
        with pytest.raises(_reslice.ResliceError, match="No space left"):
            nj.reslice(img, _same_grid(img), output=str(tmp_path / name))
    assert os.listdir(tmp_path) == []


def test_missing_nibabel_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "nibabel", None)
    with pytest.raises(ImportError, match=r"nitorch_jit\[io\]"):
        nj.reslice("a.nii", "b.nii")


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_import_does_not_import_nibabel():
    code = "import sys, nitorch_jit; nitorch_jit.reslice; print('nibabel' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == "False"


def test_transform_file_errors_name_the_line(tmp_path):
    _lta(tmp_path, np.eye(4))
    text = (tmp_path / "t.lta").read_text().replace("0.000000000000000e+00 1.0", "zero 1.0", 1)
    bad = _write(tmp_path / "bad.lta", text)
    with pytest.raises(transforms.TransformError, match=r"bad.lta, line \d+: expected"):
        transforms.read_transform(bad)
    itk = _write(tmp_path / "i.txt", "#Insight Transform File V1.0\nTransform: "
                 "AffineTransform_double_3_3\nParameters: 1 0 0 0 1 0 0 0 1 0 0\n")
    with pytest.raises(transforms.TransformError, match="line 3: expected 12"):
        transforms.read_transform(itk)
    with pytest.raises(transforms.TransformError, match="not found"):
        transforms.read_transform(tmp_path / "none.txt")


def test_ants_binary_mat(tmp_path):
    """ANTs' .mat (MATLAB v4: the 12 parameters and the centre 'fixed') reads as the text."""
    io = pytest.importorskip("scipy.io")
    lin = _rotation_z(90).round()[:3, :3]
    params = np.concatenate([lin.ravel(), [1.0, -2.0, 0.5]])[:, None]
    path = str(tmp_path / "0GenericAffine.mat")
    io.savemat(path, {"AffineTransform_double_3_3": params, "fixed": np.array([[3.0], [1], [2]])},
               format="4")
    text = _itk(tmp_path, lin, trans=(1, -2, 0.5), centre=(3, 1, 2))
    np.testing.assert_allclose(transforms.read_transform(path)[0],
                               transforms.read_transform(text)[0], atol=1e-12)


def test_simpleitk_agrees_on_the_itk_convention(tmp_path):
    """SimpleITK writes the transform file and resamples with it: the reference."""
    sitk = pytest.importorskip("SimpleITK")
    moving, (shape, taff) = _oblique_pair()
    tr = sitk.AffineTransform(3)
    tr.SetMatrix((0.98, -0.17, 0.02, 0.17, 0.97, 0.05, -0.01, -0.05, 1.01))
    tr.SetTranslation((1.5, -2.0, 0.7))
    tr.SetCenter((3.0, -4.0, 2.0))
    path = str(tmp_path / "t.tfm")
    sitk.WriteTransform(tr, path)
    mpath = str(tmp_path / "m.nii.gz")
    nib.save(moving, mpath)
    tpath = str(tmp_path / "t.nii.gz")
    nib.save(nib.Nifti1Image(np.zeros(shape, np.float32), taff), tpath)
    ref_img = sitk.Resample(sitk.ReadImage(mpath), sitk.ReadImage(tpath), tr,
                            sitk.sitkLinear, 0.0, sitk.sitkFloat64)
    ref = sitk.GetArrayFromImage(ref_img).transpose(2, 1, 0)
    out = nj.reslice(mpath, tpath, [path], order=1, bound="zero").get_fdata()
    # ITK extrapolates to [-0.5, n-0.5] (its buffer's edge), we to [-0.05, n-1+0.05]:
    # compare where the moving coordinates are inside [0, n-1]
    forward, _ = transforms.read_transform(path)
    vox = np.linalg.inv(moving.affine) @ np.linalg.inv(forward) @ taff
    idx = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1)
    coords = idx @ vox[:3, :3].T + vox[:3, 3]
    inside = ((coords >= 0) & (coords <= np.array(moving.shape) - 1)).all(-1)
    assert inside.mean() > 0.5 and (out[~inside] == 0).any()
    assert _rel(out[inside], ref[inside]) < 1e-5


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("order,label", [(1, False), (3, False), (1, True)])
def test_cuda_matches_cpu(order, label):
    moving, target = _oblique_pair(np.float32, extra=(2,))
    if label:
        moving = nib.Nifti1Image((np.abs(moving.get_fdata()) * 3).astype(np.int16),
                                 moving.affine)
    cpu = nj.reslice(moving, target, order=order, label=label).get_fdata()
    gpu = nj.reslice(moving, target, order=order, label=label, device="cuda").get_fdata()
    if label:
        assert (cpu == gpu).mean() > 0.999  # ties may break differently
    else:
        assert _rel(gpu, cpu) < 1e-5


def test_simpleitk_agrees_on_field_then_affine(tmp_path):
    """A displacement field and an ITK affine, as ANTs chains them (antsApplyTransforms -t
    WARP -t AFFINE: the field on target points, then the affine), against SimpleITK's
    CompositeTransform([affine, field]), which applies the field first."""
    sitk = pytest.importorskip("SimpleITK")
    moving, (shape, taff) = _oblique_pair()
    mpath = str(tmp_path / "m.nii.gz")
    nib.save(moving, mpath)
    tpath = str(tmp_path / "t.nii.gz")
    nib.save(nib.Nifti1Image(np.zeros(shape, np.float32), taff), tpath)
    tr = sitk.AffineTransform(3)
    tr.SetMatrix((0.97, -0.2, 0.0, 0.2, 0.97, 0.05, 0.0, -0.05, 1.0))
    tr.SetTranslation((1.5, -2.0, 0.7))
    tr.SetCenter((3.0, -4.0, 2.0))
    apath = str(tmp_path / "a.txt")
    sitk.WriteTransform(tr, apath)
    idx = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1)
    field = np.stack([1.5 * np.sin(idx[..., 1] / 4.0), np.cos(idx[..., 0] / 5.0),
                      0.5 * np.sin(idx[..., 2] / 3.0)], -1)  # LPS mm, smooth, not constant
    wpath = str(tmp_path / "w.nii.gz")
    nib.save(nib.Nifti1Image(field[:, :, :, None, :].astype(np.float32), taff), wpath)
    ref_img = sitk.ReadImage(tpath)

    def field_transform():  # SimpleITK takes the image over: a new one each time
        disp = sitk.GetImageFromArray(field.transpose(2, 1, 0, 3).astype(np.float64),
                                      isVector=True)
        disp.CopyInformation(ref_img)
        return sitk.DisplacementFieldTransform(disp)
    composite = sitk.CompositeTransform([tr, field_transform()])
    ref = sitk.GetArrayFromImage(sitk.Resample(sitk.ReadImage(mpath), ref_img, composite,
                                               sitk.sitkLinear, 0.0, sitk.sitkFloat64))
    ref = ref.transpose(2, 1, 0)
    out = nj.reslice(mpath, tpath, [apath], displacement=wpath, bound="zero").get_fdata()
    # where both are inside the moving image: our coordinates, computed here in numpy
    pull = np.linalg.inv(transforms.read_transform(apath)[0])
    world = idx @ taff[:3, :3].T + taff[:3, 3] + field * [-1, -1, 1]
    coords = (world @ pull[:3, :3].T + pull[:3, 3]) @ np.linalg.inv(moving.affine)[:3, :3].T \
        + np.linalg.inv(moving.affine)[:3, 3]
    inside = ((coords >= 0) & (coords <= np.array(moving.shape) - 1)).all(-1)
    assert inside.mean() > 0.5
    assert _rel(out[inside], ref[inside]) < 1e-5
    # the other order (affine first, then the field) is a different image
    swapped = sitk.GetArrayFromImage(sitk.Resample(
        sitk.ReadImage(mpath), ref_img, sitk.CompositeTransform(
            [field_transform(), tr]),
        sitk.sitkLinear, 0.0, sitk.sitkFloat64)).transpose(2, 1, 0)
    assert _rel(out[inside], swapped[inside]) > 1e-2


def test_docstring_examples():
    for module in (_reslice, transforms):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


@pytest.mark.parametrize("lib", ["isal", "zlib-ng", "zlib"])
def test_gzip_outputs_read_back_with_every_compressor(lib, tmp_path, monkeypatch):
    """.nii.gz outputs written with ISA-L, zlib-ng or zlib are standard gzip: Python's gzip
    module and nibabel read back the same voxels (several 4 MB members)."""
    import gzip
    import importlib.util
    if lib != "zlib" and importlib.util.find_spec(lib.replace("-", "_")) is None:
        pytest.skip(f"{lib} is not installed")
    monkeypatch.setenv("NI_JIT_GZIP", lib)
    assert _reslice.gzip_compressor()[0] == lib
    data = _rng().standard_normal((64, 64, 300)).astype(np.float32)  # 4.9 MB: two members
    img = nib.Nifti1Image(data, np.eye(4))
    out = tmp_path / "out.nii.gz"
    _reslice._save(nib, img, str(out))
    assert gzip.decompress(out.read_bytes()) == img.to_bytes()
    np.testing.assert_array_equal(nib.load(str(out)).get_fdata(dtype=np.float32), data)


def test_gzip_choice_rejects_unknown_names(monkeypatch):
    monkeypatch.setenv("NI_JIT_GZIP", "brotli")
    with pytest.raises(_reslice.ResliceError, match="NI_JIT_GZIP='brotli': expected isal"):
        _reslice.gzip_compressor()
