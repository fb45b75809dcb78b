"""reslice: resample NIfTI / MGH images onto a target grid through affine transforms and a
displacement field, with nitorch_jit's kernels. nibabel (the ``io`` extra) reads and writes.

Geometry. A point of the target (RAS mm, ``x = A_t v``) is first displaced by the
displacement field, if any (``x + u(x)``, ITK/ANTs convention: the field maps target points to
moving points), then taken to the moving image by the inverse of the composed affine
transforms, then to moving voxels: ``v_m = A_m^-1 P (A_t v + u(A_t v))`` with
``P = (T_n ... T_1)^-1`` where each ``T_k`` maps moving RAS to target RAS (see
nitorch_jit.io.transforms). The image is interpolated once.

Kernels. Without a displacement field the affine map goes to ``affine_pull`` (no grid in
memory); with one, a grid is built and pulled in chunks along the slowest output axis.

Layout. nibabel's arrays are Fortran-ordered ``[X, Y, Z, ...]``, which is ``[..., Z, Y, X]``
C-ordered: the kernels get that view (no transpose copy) and the grid's components are in
that order (``k, j, i``); the output comes back the same way and is written without a copy.
"""
import importlib
import os
import secrets
import time

import numpy as np
import torch

from ..ops.affine import affine_pull_codes
from ..ops.options import bound_codes, order_codes
from ..ops.pushpull import pull_codes
from ..ops.splinc import prefilter
from .transforms import TransformError, check_invertible, read_transform

__all__ = ["reslice", "ResliceError"]

_CHUNK_POINTS = 1 << 21  # output points per grid chunk: bounds the grid's memory (24 MB)
_REVERSE = np.eye(4)[[2, 1, 0, 3]]  # xyz <-> tensor order (k, j, i)
_EXTENSIONS = (".nii.gz", ".nii", ".mgz", ".mgh")
_MGH_DTYPES = ("uint8", "int16", "int32", "float32")


class ResliceError(ValueError):
    """Bad input to reslice: a missing or unreadable file, a transform that cannot be used,
    a displacement field of an unknown layout, an output that cannot be written."""


def _nibabel():
    try:
        import nibabel
    except ImportError:
        raise ImportError("reslice reads and writes images with nibabel, which is not "
                          "installed: pip install 'nitorch_jit[io]' (or pip install "
                          "nibabel)") from None
    return nibabel


# ----------------------------------------------------------------------------- the core
def _resample(data, vox2vox, shape, displacement, orders, bounds, extrapolate=False,
              label=False):
    """Resample `data` [C, *in] (3 spatial dims) onto an output grid of `shape`.

    vox2vox : [4, 4] float64 array, output voxel index -> input voxel index (tensor order).
    orders, bounds : kernel codes, one per dim (parsed by the caller).
    displacement : None or tensor [*shape, 3], added to the mapped coordinates (input voxels).
    Without a displacement (and labels) this is affine_pull.
    Orders >= 2 are interpolated (the spline prefilter runs once); label=True takes integer
    data through grid_pull's label path (masks weighted by B-splines, no prefilter, most
    likely label kept) and gives 0 outside the field of view. Returns [C, *shape].
    """
    if label and all(o == 0 for o in orders):
        # nearest neighbour picks one label per point: pulling the values gives the same
        # labels as a mask per label, at the cost of one pull (exact in float32 below 2**24)
        big = bool(data.abs().max() >= 2 ** 24) if data.numel() else False
        values = _resample(data.to(torch.float64 if big else torch.float32), vox2vox, shape,
                           displacement, orders, bounds, extrapolate)
        return values.round().to(data.dtype)
    if label:
        gdtype = torch.float32
        coef = data
    else:
        gdtype = data.dtype
        coef = prefilter(data, orders, bounds)  # once for all chunks; no copy for orders < 2
    device = data.device
    mat = torch.as_tensor(vox2vox, dtype=torch.float64)
    if displacement is None and not label:  # the grid-free kernel
        return affine_pull_codes(coef[None], mat.to(device, gdtype), list(shape), orders,
                                 bounds, extrapolate)[0]
    lin, off = mat[:3, :3], mat[:3, 3]
    n0, n1, n2 = (int(s) for s in shape)
    # the affine part of one output plane (all but the slowest axis's term), computed once
    # and flat, so that each chunk is one vectorised pass: grid[z] = plane + z * step
    i1 = torch.arange(n1, dtype=torch.float64)[:, None, None]
    i2 = torch.arange(n2, dtype=torch.float64)[None, :, None]
    plane = (off + lin[:, 1] * i1 + lin[:, 2] * i2).reshape(-1).to(device, gdtype)
    step = lin[:, 0].repeat(n1 * n2).to(device, gdtype)
    rows = max(1, min(n0, _CHUNK_POINTS // max(1, n1 * n2)))
    if label:  # grid_pull finds the labels (torch.unique over the input) on every call
        rows = n0
    out = None
    grid = None
    for z0 in range(0, n0, rows):
        z1 = min(n0, z0 + rows)
        i0 = torch.arange(z0, z1, dtype=gdtype, device=device)[:, None]
        if grid is None or grid.shape[0] != z1 - z0:
            grid = torch.empty((z1 - z0, n1, n2, 3), dtype=gdtype, device=device)
        torch.addcmul(plane, i0, step, out=grid.view(z1 - z0, -1))
        if displacement is not None:
            grid += displacement[z0:z1].to(gdtype)
        part = pull_codes(coef[None], grid[None], orders, bounds, extrapolate)[0]
        if label and not extrapolate:  # the label path keeps the first label where no mask reaches
            inside = pull_codes(torch.ones((1, 1) + tuple(data.shape[1:]), dtype=gdtype,
                                           device=device), grid[None], orders, bounds, False)[0]
            part.masked_fill_(inside == 0, 0)
        if rows >= n0:
            return part
        if out is None:
            out = torch.empty((data.shape[0], n0, n1, n2), dtype=part.dtype, device=device)
        out[:, z0:z1] = part
    return out


# ----------------------------------------------------------------------------- images
def _load(path_or_img, what):
    nib = _nibabel()
    if isinstance(path_or_img, nib.spatialimages.SpatialImage):
        return path_or_img, getattr(path_or_img, "get_filename", lambda: None)() or f"<{what}>"
    path = os.fspath(path_or_img)
    if not os.path.isfile(path):
        raise ResliceError(f"{what}: {path}: file not found")
    try:
        return nib.load(path), path
    except Exception as e:  # nibabel raises many types for files it cannot read
        raise ResliceError(f"{what}: {path}: cannot read it as an image ({e})") from None


def _geometry(img):
    shape = tuple(img.shape[:3]) + (1,) * max(0, 3 - len(img.shape))
    return shape, np.asarray(img.affine, dtype=np.float64)


def _scaled(img):
    """Whether the data are stored with NIfTI scaling (nibabel moves a loaded file's scl_slope
    and scl_inter from the header to the array proxy)."""
    slope, inter = getattr(img.dataobj, "slope", None), getattr(img.dataobj, "inter", None)
    if slope is None:
        try:
            slope, inter = img.header.get_slope_inter()
        except AttributeError:  # MGH: no scaling
            return False
    return not ((slope is None or slope == 1) and (inter is None or inter == 0))


def _array(img):
    """The image's data (scaled as nibabel reads it) as a numpy array [X, Y, Z, C]."""
    arr = np.asanyarray(img.dataobj)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.ndim < 3:
        arr = arr.reshape(arr.shape + (1,) * (3 - arr.ndim))
    return arr.reshape(arr.shape[:3] + (-1,), order="F")  # no copy for nibabel's F-order


def _tensor(arr, dtype, device):
    """[X, Y, Z, C] array -> [C, Z, Y, X] tensor (a view of F-ordered data when it can be)."""
    t = torch.from_numpy(np.ascontiguousarray(arr.T) if not arr.flags.writeable else arr.T)
    return t.to(device=device, dtype=dtype)


def _output_class(nib, path, moving):
    if path is not None:
        ext = _extension(path)
        if ext in (".mgz", ".mgh"):
            return nib.MGHImage
        return nib.Nifti2Image if isinstance(moving, nib.Nifti2Image) else nib.Nifti1Image
    if isinstance(moving, (nib.Nifti1Image, nib.Nifti2Image, nib.MGHImage)):
        return type(moving)
    return nib.Nifti1Image


def _extension(path):
    low = os.fspath(path).lower()
    ext = next((e for e in _EXTENSIONS if low.endswith(e)), None)
    if ext is None:
        raise ResliceError(f"output: {path}: unknown image type; expected a name ending in "
                           f"{', '.join(_EXTENSIONS)}")
    return ext


def _check_writable(path):
    _extension(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ResliceError(f"output: {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ResliceError(f"output: {path}: folder {folder} is not writable")
    if os.path.isdir(path):
        raise ResliceError(f"output: {path} is a folder")


def _save(nib, img, path):
    """Write to a hidden temporary name beside `path`, then rename: never a partial file."""
    _check_writable(path)
    folder, name = os.path.split(os.path.abspath(path))
    ext = _extension(path)
    tmp = os.path.join(folder, f".{name[:-len(ext)]}.{secrets.token_hex(4)}.partial{ext}")
    try:
        if ext in (".nii.gz", ".mgz") and hasattr(img, "to_bytes"):
            _write_gzip(img.to_bytes(), tmp)
        else:
            nib.save(img, tmp)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise ResliceError(f"output: {path}: cannot write it ({e})") from None
        raise


_GZIP_BLOCK = 4 << 20  # bytes per gzip member
# (name, module with zlib's interface, level), fastest first
_DEFLATES = (("isal", "isal.isal_zlib", 1), ("zlib-ng", "zlib_ng.zlib_ng", 2), ("zlib", "zlib", 1))


def gzip_compressor():
    """The fastest installed deflate with zlib's interface: (name, compressobj factory).

    ISA-L (``pip install isal``, the ``gzip`` extra) at its level 1 compresses 4.4 times
    faster than zlib at level 1, to the same size (a 23 MB int16 volume: 166 vs 732 ms on
    one core); zlib-ng (``pip install zlib-ng``) at level 2, 1.2 times (its level 1 is
    faster but leaves noisy data nearly uncompressed). All write standard deflate streams,
    read by any gzip. zlib, always there, is the fallback. ``NI_JIT_GZIP=zlib`` (or isal,
    zlib-ng) picks one.

    Returns
    -------
    (str, callable)
        The library's name and ``make()`` giving a fresh compressor of gzip members.

    Examples
    --------
    >>> from nitorch_jit.io.reslice import gzip_compressor
    >>> import gzip
    >>> name, make = gzip_compressor()
    >>> c = make()
    >>> gzip.decompress(c.compress(b"abc" * 100) + c.flush()) == b"abc" * 100
    True
    """
    want = os.environ.get("NI_JIT_GZIP", "").strip().lower()
    if want not in ("",) + tuple(name for name, _, _ in _DEFLATES):
        raise ResliceError(f"NI_JIT_GZIP={want!r}: expected isal, zlib-ng or zlib")
    for name, module, level in _DEFLATES:
        if want in ("", name):
            try:
                lib = importlib.import_module(module)
            except ImportError:
                if want:
                    raise ResliceError(f"NI_JIT_GZIP={want} but {name} is not installed "
                                       f"(pip install {name})") from None
                continue
            return name, lambda: lib.compressobj(level, lib.DEFLATED, 31)


def _write_gzip(raw, path):
    """gzip at level 1 (nibabel's default) on torch's threads: the file is a series of gzip
    members, one per 4 MB block (valid gzip, read by gzip/zlib readers as one stream; bgzip
    does the same). Compression dominates the command's time otherwise."""
    from concurrent.futures import ThreadPoolExecutor
    _, make = gzip_compressor()
    view = memoryview(raw)

    def member(start):  # the compressors release the GIL while they work
        c = make()
        return c.compress(view[start:start + _GZIP_BLOCK]) + c.flush()

    starts = range(0, max(1, len(raw)), _GZIP_BLOCK)
    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
        members = pool.map(member, starts)
        with open(path, "wb") as f:
            for m in members:
                f.write(m)


def _out_dtype(dtype, moving_img):
    if dtype is None:
        return np.dtype(moving_img.get_data_dtype()).newbyteorder("="), False
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ResliceError(f"dtype: unknown data type {dtype!r}") from None
    if dt.kind not in "uif":
        raise ResliceError(f"dtype: expected an integer or floating-point type, got {dt}")
    return dt.newbyteorder("="), True


def _to_dtype(values, dt):
    """Float tensor -> numpy array of `dt`: integers rounded half away from zero and clipped."""
    if dt.kind in "ui":
        if values.is_floating_point():
            values = torch.sign(values) * torch.floor(values.abs() + 0.5)
        info = np.iinfo(dt)
        values = values.clamp(max(info.min, -2 ** 63), min(info.max, 2 ** 63 - 1))
    arr = values.cpu().numpy()
    return arr.astype(dt, copy=False)


# ----------------------------------------------------------------------------- transforms
def _transform_list(transforms):
    """Normalise to [(source, inverse)], source a path or a 4x4 array."""
    if transforms is None:
        return []
    if isinstance(transforms, (str, os.PathLike, np.ndarray)):
        transforms = [transforms]
    out = []
    for i, t in enumerate(transforms):
        inverse = False
        if isinstance(t, tuple):
            if len(t) != 2 or not isinstance(t[1], bool):
                raise ResliceError(f"transforms[{i}]: expected a path, a 4x4 matrix or a "
                                   f"(path, inverse: bool) pair, got {t!r}")
            t, inverse = t
        if isinstance(t, (str, os.PathLike)):
            out.append((os.fspath(t), inverse))
        else:
            try:
                m = np.asarray(t, dtype=np.float64)
            except (TypeError, ValueError):
                m = None
            if m is None or m.shape not in ((4, 4), (3, 4)):
                raise ResliceError(f"transforms[{i}]: expected a path or a 4x4 matrix, got "
                                   f"{t!r:.80}")
            if m.shape == (3, 4):
                m = np.vstack([m, [0, 0, 0, 1]])
            out.append((m, inverse))
    return out


def _compose(transforms, moving_geom, target_geom):
    """Moving RAS -> target RAS matrix of the chain, and the notes of the readers."""
    forward = np.eye(4)
    notes = []
    for source, inverse in transforms:
        if isinstance(source, np.ndarray):
            mat, what = source, "matrix"
        else:
            try:
                mat, note = read_transform(source, moving_geom, target_geom)
            except TransformError as e:
                raise ResliceError(str(e)) from None
            what = source
            if note:
                notes.append(note)
        if inverse:
            mat = np.linalg.inv(_invertible(mat, what))
        forward = mat @ forward
    return forward, notes


def _invertible(mat, what):
    try:
        return check_invertible(mat, what)
    except TransformError as e:
        raise ResliceError(str(e)) from None


def _displacement(nib, disp, target_geom, pull_ras, moving_affine, device, dtype):
    """The field in moving voxels (tensor order, [Z, Y, X, 3] on the target grid)."""
    img, name = _load(disp, "displacement")
    shape = img.shape
    if len(shape) == 5 and shape[3] == 1 and shape[4] == 3:  # ITK/ANTs [X, Y, Z, 1, 3]
        arr = np.asanyarray(img.dataobj)[:, :, :, 0, :]
    elif len(shape) == 4 and shape[3] == 3:  # the same without the time axis
        arr = np.asanyarray(img.dataobj)
    else:
        raise ResliceError(f"displacement: {name}: shape {tuple(shape)} fits no displacement "
                           f"layout; expected [X, Y, Z, 1, 3] (ITK/ANTs, mm, LPS) or "
                           f"[X, Y, Z, 3]")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # LPS mm -> moving voxels (xyz), then rows in tensor order (k, j, i)
    to_vox = (np.linalg.inv(moving_affine) @ pull_ras)[:3, :3] @ np.diag([-1.0, -1.0, 1.0])
    to_vox = torch.as_tensor(to_vox[::-1].copy(), dtype=dtype, device=device)
    u = torch.from_numpy(np.ascontiguousarray(arr.T)).to(device, dtype)  # [3, Z, Y, X]
    d_affine = np.asarray(img.affine, dtype=np.float64)
    if tuple(arr.shape[:3]) != tuple(target_geom[0]) or not np.allclose(
            d_affine, target_geom[1], atol=1e-6):
        # the field on its own grid: interpolate it (linearly, zero outside) at target voxels
        v2v = _REVERSE @ np.linalg.inv(_invertible(d_affine, f"displacement {name}: affine")) \
            @ target_geom[1] @ _REVERSE
        u = _resample(u, v2v, target_geom[0][::-1], None, [1] * 3, bound_codes("replicate", 3))
    return torch.einsum("cd,dzyx->zyxc", to_vox, u)


# ----------------------------------------------------------------------------- public
def reslice(moving, target, transforms=(), displacement=None, *, order=1, bound="dct2",
            extrapolate=False, label=False, dtype=None, device=None, output=None,
            log=None):
    """Resample an image onto a target's grid through affine transforms and a displacement.

    The output has the target's shape (first 3 dims) and affine, the moving image's extra
    dims (4-D time series, 5-D vectors: every volume in one batched call) and its data type
    (``dtype`` overrides). The transforms and the displacement compose into one mapping, so
    the image is interpolated once. Outside the moving image's field of view the value is 0
    (unless ``extrapolate``).

    Parameters
    ----------
    moving : str, os.PathLike or nibabel image
        The image to resample (NIfTI-1/2 ``.nii``/``.nii.gz``, MGH ``.mgh``/``.mgz``).
    target : str, os.PathLike, nibabel image or (shape, affine)
        The grid to resample onto.
    transforms : sequence, optional
        Affine transforms, in the order they move the moving image towards the target: the
        first moves the moving image, the last lands on the target. Each is a file path
        (FreeSurfer LTA, ITK/ANTs text or ``.mat``, plain 4x4 text matrix; see
        :func:`nitorch_jit.io.transforms.read_transform` for each format's direction), a 4x4
        array (RAS to RAS, moving to target) or a ``(path_or_array, inverse)`` pair where
        ``inverse=True`` applies the inverse. ITK/ANTs files go in the order
        ``antsApplyTransforms -t`` takes them.
    displacement : str, os.PathLike or nibabel image, optional
        A displacement field in the ITK/ANTs layout ``[X, Y, Z, 1, 3]`` (or ``[X, Y, Z, 3]``),
        in mm, LPS, mapping target points to moving points (``x -> x + u(x)``), applied to the
        target's points before the affine transforms take them to the moving image: an ANTs
        registration's ``antsApplyTransforms -t 1Warp.nii.gz -t 0GenericAffine.mat`` is
        ``displacement='1Warp.nii.gz', transforms=['0GenericAffine.mat']``. Defined on its own
        grid; interpolated linearly at the target's voxels when that grid differs.
    order : int, default 1
        Spline order 0..7; orders >= 2 interpolate (the spline prefilter runs first, as in
        scipy).
    bound : str, default 'dct2'
        Boundary condition, as in :func:`nitorch_jit.grid_pull`.
    extrapolate : bool, default False
        False: 0 at points more than 0.05 voxel outside the moving image. True: use `bound`.
    label : bool, default False
        Integer label maps: each label's mask is interpolated with B-spline weights of
        `order` (no prefilter, so the weights stay non-negative) and the most likely label is
        kept. The data must hold integers.
    dtype : str or numpy dtype, optional
        Output data type (default: the moving image's). Integers are rounded half away from
        zero and clipped to the type's range. A scaled integer input (NIfTI scl_slope) without
        `dtype` is written with scaling chosen by nibabel.
    device : str or torch.device, optional
        Where to compute ('cpu', 'cuda'); default 'cpu'.
    output : str or os.PathLike, optional
        Write the result there (``.nii``, ``.nii.gz``, ``.mgz``, ``.mgh``): to a temporary
        name first, renamed when complete.
    log : callable, optional
        Called with notes (an LTA that was inverted). Default: ``warnings.warn``.

    Returns
    -------
    nibabel image
        The resliced image (NIfTI unless the moving image or `output` is MGH).

    Raises
    ------
    ResliceError
        Missing or unreadable files, malformed transforms (the message names the line),
        singular matrices, displacement fields of an unknown layout, outputs that cannot be
        written.
    ImportError
        nibabel is not installed.

    Examples
    --------
    >>> import numpy as np, nibabel as nib
    >>> import nitorch_jit as nj
    >>> moving = nib.Nifti1Image(np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.eye(4))
    >>> shift = np.eye(4); shift[0, 3] = -1          # moving RAS -> target RAS: 1 mm left
    >>> out = nj.reslice(moving, ((2, 3, 4), np.eye(4)), [shift])
    >>> out.shape, float(out.get_fdata()[0, 0, 0]), float(moving.get_fdata()[1, 0, 0])
    ((2, 3, 4), 12.0, 12.0)
    """
    nib = _nibabel()
    img, _ = _load(moving, "moving")
    if isinstance(target, tuple) and len(target) == 2 and not isinstance(target[0], str):
        shape = tuple(int(s) for s in target[0])[:3]
        shape = shape + (1,) * (3 - len(shape))
        target_img, target_geom = None, (shape, np.asarray(target[1], dtype=np.float64))
        if target_geom[1].shape != (4, 4):
            raise ResliceError(f"target: expected a 4x4 affine, got shape "
                               f"{target_geom[1].shape}")
    else:
        target_img, _ = _load(target, "target")
        target_geom = _geometry(target_img)
    if output is not None:
        _check_writable(output)
    job = _Job(nib, img, target_img, target_geom, _transform_list(transforms), displacement,
               order, bound, extrapolate, label, dtype, device)
    for note in job.notes:
        if log is None:
            import warnings
            warnings.warn(note, stacklevel=2)
        else:
            log(note)
    out = job.run(_output_class(nib, output, img))
    if output is not None:
        _save(nib, out, output)
    return out


class _Job:
    """One image: geometry and transforms checked at construction (nothing is read but
    headers and transform files), data read, resampled and assembled by run()."""

    def __init__(self, nib, img, target_img, target_geom, transforms, displacement, order,
                 bound, extrapolate, label, dtype, device):
        self.nib, self.img, self.target_img, self.target_geom = nib, img, target_img, target_geom
        try:
            self.order = order_codes(order, 3, "order")
            self.bound = bound_codes(bound, 3, "bound")
        except (TypeError, ValueError) as e:
            raise ResliceError(str(e)) from None
        if not isinstance(extrapolate, bool) or not isinstance(label, bool):
            raise ResliceError("extrapolate, label: expected True or False")
        self.extrapolate, self.label = extrapolate, label
        self.out_dtype, self.dtype_given = _out_dtype(dtype, img)
        try:
            self.device = torch.device(device or "cpu")
        except (RuntimeError, TypeError):
            raise ResliceError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got "
                               f"{device!r}") from None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ResliceError("device: cuda was asked for, but this torch sees no CUDA "
                               f"device (torch {torch.__version__})")
        moving_geom = _geometry(img)
        self.moving_affine = _invertible(moving_geom[1], "moving image affine")
        _invertible(target_geom[1], "target affine")
        forward, self.notes = _compose(transforms, moving_geom, target_geom)
        self.pull_ras = np.linalg.inv(_invertible(forward, "composed transform"))
        self.vox2vox = np.linalg.inv(self.moving_affine) @ self.pull_ras @ target_geom[1]
        self.displacement = displacement
        self.ntransforms = len(transforms)
        if displacement is not None:  # check the field's layout before any data is read
            dimg, dname = _load(displacement, "displacement")
            if not ((len(dimg.shape) == 5 and dimg.shape[3:] == (1, 3))
                    or (len(dimg.shape) == 4 and dimg.shape[3] == 3)):
                raise ResliceError(f"displacement: {dname}: shape {tuple(dimg.shape)} fits no "
                                   f"displacement layout; expected [X, Y, Z, 1, 3] (ITK/ANTs, "
                                   f"mm, LPS) or [X, Y, Z, 3]")
            self.displacement = dimg
        if len(img.shape) > 5:
            raise ResliceError(f"moving: {len(img.shape)}-D images are not supported (3-D, "
                               f"4-D time series and 5-D vector images are)")

    def run(self, cls):
        timer = time.perf_counter()
        arr = _array(self.img)
        self.read_s = time.perf_counter() - timer
        timer = time.perf_counter()
        if self.label:
            if arr.dtype.kind == "f":
                if not np.array_equal(arr, np.round(arr)):
                    raise ResliceError("label: the moving image holds non-integer values; "
                                       "--label is for integer label maps")
            data = _tensor(arr, torch.int64, self.device)
            compute = torch.float32
        else:
            compute = torch.float64 if self.img.get_data_dtype() == np.float64 \
                or self.out_dtype == np.float64 else torch.float32
            data = _tensor(arr, compute, self.device)
        disp = None
        if self.displacement is not None:
            disp = _displacement(self.nib, self.displacement, self.target_geom, self.pull_ras,
                                 self.moving_affine, self.device,
                                 torch.float32 if self.label else compute)
        shape = self.target_geom[0]
        out = _resample(data, _REVERSE @ self.vox2vox @ _REVERSE, shape[::-1], disp,
                        self.order, self.bound, self.extrapolate, self.label)
        result = self._image(cls, out, self.img.shape[3:])
        self.resample_s = time.perf_counter() - timer
        return result

    def _image(self, cls, out, extra):
        nib, img = self.nib, self.img
        scaled_input = _scaled(img) and not self.dtype_given and self.out_dtype.kind in "ui"
        if scaled_input:  # leave the scaling to nibabel, as it read it
            data = out.cpu().numpy()
        else:
            data = _to_dtype(out, self.out_dtype)
        data = data.T.reshape(tuple(self.target_geom[0]) + tuple(extra), order="F")
        affine = self.target_geom[1]
        if cls is nib.MGHImage:
            if data.dtype.name not in _MGH_DTYPES:
                data = data.astype(np.float32)
            if len(extra) > 1:
                raise ResliceError(f"output: MGH images hold at most 4 dims; the moving image "
                                   f"has {3 + len(extra)}")
            return nib.MGHImage(data, affine, img.header.copy()
                                if isinstance(img, nib.MGHImage) else None)
        header = img.header.copy() if isinstance(img, (nib.Nifti1Image, nib.Nifti2Image)) \
            else None  # keeps intent, units, description, TR
        res = cls(data, affine, header)
        if scaled_input:
            res.set_data_dtype(self.out_dtype)
        else:
            res.header.set_slope_inter(np.nan, np.nan)
            res.set_data_dtype(data.dtype)
        qcode, scode = 1, 1
        tgt = self.target_img
        if tgt is not None and isinstance(tgt, (nib.Nifti1Image, nib.Nifti2Image)):
            qcode = int(tgt.header["qform_code"]) or int(tgt.header["sform_code"]) or 1
            scode = int(tgt.header["sform_code"]) or qcode
        res.set_qform(affine, qcode)
        res.set_sform(affine, scode)
        return res


def _describe(job, moving_name, out_name, seconds):
    kind = "label" if job.label else f"order {job.order[0]}"
    parts = [f"{job.ntransforms} transform{'s' if job.ntransforms != 1 else ''}"]
    if job.displacement is not None:
        parts.append("displacement")
    return (f"{moving_name} -> {out_name}: {tuple(job.img.shape)} -> "
            f"{tuple(job.target_geom[0]) + tuple(job.img.shape[3:])}, {kind}, "
            f"{', '.join(parts)}, {job.out_dtype}: {seconds:.2f} s (read "
            f"{job.read_s:.2f} s, resample {job.resample_s:.2f} s, write {job.write_s:.2f} s)")


def output_names(moving, output=None, suffix="_resliced"):
    """Output paths for the CLI: `output` for one input, else the input name + `suffix`."""
    if output is not None:
        if len(moving) != 1:
            raise ResliceError(f"-o/--output names one file but {len(moving)} images were "
                               f"given; use --suffix for several")
        return [output]
    names = []
    for m in moving:
        low = m.lower()
        ext = next((e for e in _EXTENSIONS if low.endswith(e)), None)
        if ext is None:
            ext = os.path.splitext(m)[1]
        names.append(m[:len(m) - len(ext)] + suffix + ext)
    return names


def run_cli(args, out=print):
    """The `nitorch-jit reslice` command: check everything, then resample each image."""
    nib = _nibabel()
    target_img, _ = _load(args.target, "target")
    target_geom = _geometry(target_img)
    names = output_names(args.moving, args.output, args.suffix)
    transforms = [(path, inv) for path, inv in (args.transforms or [])]
    if args.displacement is not None and not os.path.isfile(args.displacement):
        raise ResliceError(f"displacement: {args.displacement}: file not found")
    jobs = []
    for moving, name in zip(args.moving, names):  # every check before anything is written
        if os.path.abspath(moving) == os.path.abspath(name):
            raise ResliceError(f"output: {name} is the moving image itself")
        img, _ = _load(moving, "moving")
        _check_writable(name)
        jobs.append(_Job(nib, img, target_img, target_geom, transforms, args.displacement,
                         args.order, args.bound, args.extrapolate, args.label, args.dtype,
                         args.device))
    for job, moving, name in zip(jobs, args.moving, names):
        for note in job.notes:
            out(f"note: {note}")
        timer = time.perf_counter()
        res = job.run(_output_class(nib, name, job.img))
        t = time.perf_counter()
        _save(nib, res, name)
        job.write_s = time.perf_counter() - t
        out(_describe(job, moving, name, time.perf_counter() - timer))
    return 0

