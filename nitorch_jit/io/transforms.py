"""Readers of affine transform files for ``reslice``: FreeSurfer LTA, ITK/ANTs, plain 4x4.

Every reader returns the same thing: a 4x4 float64 matrix that maps **moving** RAS
coordinates (mm) to **target** RAS coordinates, i.e. where a point of the moving image lands
in the target. Each format is read in the direction its own tools apply it:

- LTA (FreeSurfer): its matrix maps its src volume to its dst volume, read as
  ``mri_vol2vol --mov MOVING --targ TARGET --lta FILE`` reads it (src = moving,
  dst = target). ``LINEAR_VOX_TO_VOX`` (type 0) matrices are turned into RAS-to-RAS with the
  vox2ras matrices of the file's volume info. When the volume info shows src = target and
  dst = moving, the matrix is inverted, as FreeSurfer does, with a note saying so.
- ITK / ANTs text (``AffineTransform_double_3_3``, ``MatrixOffsetTransformBase_*``, float or
  double): maps target points to moving points in LPS coordinates, ``y = A (x - c) + c + t``
  (c: FixedParameters, the centre), as ``antsApplyTransforms`` and SimpleITK's ``Resample``
  apply it. ANTs' binary ``.mat`` files are read too when scipy is installed.
- A plain 4x4 (or 3x4) matrix, whitespace-separated, ``#`` comments: a RAS-to-RAS matrix
  from moving to target, the direction of an LTA's RAS-to-RAS matrix.
"""
import math
import os

import numpy as np

__all__ = ["TransformError", "read_transform", "vox2ras_from_volume_info"]

# LPS <-> RAS: negate the first two world axes
_FLIP = np.diag([-1.0, -1.0, 1.0, 1.0])
_ITK_AFFINES = ("AffineTransform_double_3_3", "AffineTransform_float_3_3",
                "MatrixOffsetTransformBase_double_3_3", "MatrixOffsetTransformBase_float_3_3")
_LTA_TYPES = {0: "LINEAR_VOX_TO_VOX", 1: "LINEAR_RAS_TO_RAS"}
_GEOMETRY_ATOL = 1e-3  # mm: volume info is printed with limited precision


class TransformError(ValueError):
    """A transform file that cannot be read, or a transform that cannot be used."""


def _fail(path, line, msg):
    where = f"{path}, line {line}" if line else f"{path}"
    raise TransformError(f"{where}: {msg}")


def _numbers(path, lineno, words, count=None, what="numbers"):
    try:
        values = [float(w) for w in words]
    except ValueError:
        _fail(path, lineno, f"expected {what}, got {' '.join(words)!r}")
    if count is not None and len(values) != count:
        _fail(path, lineno, f"expected {count} {what}, got {len(values)}")
    if not all(math.isfinite(v) for v in values):
        _fail(path, lineno, f"expected finite {what}, got {' '.join(words)!r}")
    return values


def check_invertible(mat, what):
    """Raise TransformError if the 4x4 `mat` is singular (or numerically so)."""
    lin = mat[:3, :3]
    if not np.all(np.isfinite(mat)) or abs(np.linalg.det(lin)) < 1e-12 * max(
            1.0, np.abs(lin).max()) ** 3 or np.linalg.cond(lin) > 1e12:
        raise TransformError(f"{what}: the matrix is singular (det {np.linalg.det(lin):.3g}), "
                             f"so it cannot be inverted:\n{np.array2string(mat, precision=6)}")
    return mat


def vox2ras_from_volume_info(shape, voxel_size, xras, yras, zras, cras):
    """The vox2ras of FreeSurfer's volume geometry: direction cosines (columns xras, yras,
    zras) scaled by the voxel size, with the centre voxel ``shape / 2`` at ``cras``.

    Parameters
    ----------
    shape, voxel_size, xras, yras, zras, cras : sequences of 3 numbers
        The ``volume``, ``voxelsize``, ``xras``, ``yras``, ``zras`` and ``cras`` fields of an
        LTA's volume info (or of an MGH header).

    Returns
    -------
    ndarray (4, 4), float64

    Examples
    --------
    >>> from nitorch_jit.io.transforms import vox2ras_from_volume_info
    >>> vox2ras_from_volume_info([4, 4, 4], [1, 1, 1], [-1, 0, 0], [0, 0, -1], [0, 1, 0],
    ...                          [0, 0, 0])[:3].tolist()
    [[-1.0, 0.0, 0.0, 2.0], [0.0, 0.0, 1.0, -2.0], [0.0, -1.0, 0.0, 2.0]]
    """
    mdc = np.array([xras, yras, zras], dtype=np.float64).T
    lin = mdc * np.asarray(voxel_size, dtype=np.float64)[None, :]
    mat = np.eye(4)
    mat[:3, :3] = lin
    mat[:3, 3] = np.asarray(cras, dtype=np.float64) - lin @ (np.asarray(shape, np.float64) / 2)
    return mat


def _same_geometry(geom, other):
    """geom, other: (shape, vox2ras) pairs; compare the first 3 dims and the matrices."""
    return (tuple(int(s) for s in geom[0][:3]) == tuple(int(s) for s in other[0][:3])
            and np.allclose(geom[1], other[1], atol=_GEOMETRY_ATOL))


# ----------------------------------------------------------------------------- LTA
def _read_lta(path, lines, moving, target):
    fields = {}
    matrix_rows = []
    volume = None  # 'src' / 'dst' while reading volume info
    info = {"src": {}, "dst": {}}
    lineno_type = None
    expect_rows = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        low = line.lower()
        if expect_rows:
            matrix_rows.append(_numbers(path, lineno, line.split(), 4, "matrix entries"))
            expect_rows -= 1
            continue
        if low in ("src volume info", "dst volume info"):
            volume = low[:3]
            continue
        if "=" in line:
            key, value = (s.strip() for s in line.split("=", 1))
            key = key.lower()
            if volume is not None:
                info[volume][key] = (lineno, value)
            else:
                fields[key] = (lineno, value)
                if key == "type":
                    lineno_type = lineno
            continue
        words = line.split()
        if volume is None and not matrix_rows and len(words) == 3 and "type" in fields:
            dims = _numbers(path, lineno, words, 3, "'count rows cols'")
            if dims != [1.0, 4.0, 4.0]:
                _fail(path, lineno, f"expected one 4x4 matrix ('1 4 4'), got {line!r}")
            expect_rows = 4
            continue
        if words[0].lower() in ("subject", "fscale"):
            continue
        _fail(path, lineno, f"unexpected line in an LTA file: {raw.rstrip()!r}")
    if "type" not in fields:
        _fail(path, None, "not an LTA file: no 'type = ...' line")
    try:
        kind = int(fields["type"][1].split()[0])
    except (ValueError, IndexError):
        _fail(path, lineno_type, f"expected an integer type, got {fields['type'][1]!r}")
    if kind not in _LTA_TYPES:
        _fail(path, lineno_type, f"LTA type {kind} is not supported; expected 0 "
              "(LINEAR_VOX_TO_VOX) or 1 (LINEAR_RAS_TO_RAS)")
    if "nxforms" in fields and fields["nxforms"][1].split()[0] != "1":
        _fail(path, fields["nxforms"][0], f"expected nxforms = 1, got {fields['nxforms'][1]!r}")
    if expect_rows or len(matrix_rows) != 4:
        _fail(path, None, "the 4x4 matrix ('1 4 4' followed by 4 rows) is missing or cut short")
    mat = np.array(matrix_rows, dtype=np.float64)
    if not np.allclose(mat[3], [0, 0, 0, 1]):
        _fail(path, None, f"the last matrix row must be 0 0 0 1, got {mat[3].tolist()}")

    geoms = {}
    for side in ("src", "dst"):
        geoms[side] = _volume_info(path, side, info[side])
    note = None
    if kind == 0:  # voxel to voxel: RAS = dst_vox2ras @ V @ inv(src_vox2ras)
        src = geoms["src"] or moving
        dst = geoms["dst"] or target
        if src is None or dst is None:
            _fail(path, None, "a LINEAR_VOX_TO_VOX LTA needs valid src/dst volume info "
                  "(or the moving and target images)")
        mat = dst[1] @ mat @ np.linalg.inv(check_invertible(src[1], f"{path}: src vox2ras"))
    if moving is not None and target is not None and geoms["src"] and geoms["dst"]:
        forward = _same_geometry(geoms["src"], moving) and _same_geometry(geoms["dst"], target)
        backward = _same_geometry(geoms["src"], target) and _same_geometry(geoms["dst"], moving)
        if backward and not forward:
            check_invertible(mat, str(path))
            mat = np.linalg.inv(mat)
            note = (f"{os.path.basename(str(path))}: its src volume is the target and its dst "
                    f"the moving image, so it was inverted (as FreeSurfer does)")
    return mat, note


def _volume_info(path, side, entries):
    """(shape, vox2ras) from an LTA volume info block, or None when it is absent or invalid."""
    if not entries or entries.get("valid", (0, "0"))[1].split()[:1] != ["1"]:
        return None
    values = {}
    for key, count in (("volume", 3), ("voxelsize", 3), ("xras", 3), ("yras", 3),
                       ("zras", 3), ("cras", 3)):
        if key not in entries:
            _fail(path, None, f"{side} volume info is marked valid but has no '{key}' line")
        lineno, value = entries[key]
        values[key] = _numbers(path, lineno, value.split(), count, f"{key} values")
    shape = [int(v) for v in values["volume"]]
    return shape, vox2ras_from_volume_info(shape, values["voxelsize"], values["xras"],
                                           values["yras"], values["zras"], values["cras"])


# ----------------------------------------------------------------------------- ITK
def _itk_matrix(params, fixed):
    """target -> moving LPS matrix of y = A (x - c) + c + t, as RAS moving -> target."""
    lin = np.array(params[:9], dtype=np.float64).reshape(3, 3)
    trans = np.array(params[9:12], dtype=np.float64)
    centre = np.array(fixed, dtype=np.float64)
    lps = np.eye(4)
    lps[:3, :3] = lin
    lps[:3, 3] = trans + centre - lin @ centre
    return _FLIP @ lps @ _FLIP  # still target -> moving (RAS); the caller inverts it


def _read_itk(path, lines):
    kind = params = fixed = None
    count = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if ":" not in line:
            _fail(path, lineno, f"expected 'Key: values' in an ITK transform file, got {line!r}")
        key, value = (s.strip() for s in line.split(":", 1))
        if key == "Transform":
            count += 1
            if count > 1:
                _fail(path, lineno, "more than one transform in this file; give each affine "
                      "in its own file (composite transforms are not read)")
            if value not in _ITK_AFFINES:
                _fail(path, lineno, f"transform type {value!r} is not supported; expected one "
                      f"of {', '.join(_ITK_AFFINES)}")
            kind = (lineno, value)
        elif key == "Parameters":
            params = _numbers(path, lineno, value.split(), 12, "parameters (9 matrix entries "
                              "and 3 translations)")
        elif key == "FixedParameters":
            fixed = _numbers(path, lineno, value.split(), 3, "fixed parameters (the centre)")
        else:
            _fail(path, lineno, f"unexpected key {key!r} in an ITK transform file")
    if kind is None:
        _fail(path, None, "no 'Transform: ...' line")
    if params is None:
        _fail(path, None, "no 'Parameters: ...' line")
    return _itk_matrix(params, fixed if fixed is not None else [0.0, 0.0, 0.0])


def _read_itk_mat(path):
    try:
        from scipy.io import loadmat
    except ImportError:
        _fail(path, None, "a binary ITK/ANTs .mat file needs scipy to be read (pip install "
              "scipy), or convert it to text: ConvertTransformFile 3 in.mat out.txt")
    try:
        data = loadmat(str(path))
    except Exception as e:  # scipy raises several types for files that are not MATLAB files
        _fail(path, None, f"not a readable MATLAB/ITK .mat file ({e})")
    key = next((k for k in _ITK_AFFINES if k in data), None)
    if key is None:
        _fail(path, None, f"no affine in this .mat file (keys: "
              f"{', '.join(k for k in data if not k.startswith('__'))}); expected one of "
              f"{', '.join(_ITK_AFFINES)}")
    params = np.asarray(data[key], dtype=np.float64).ravel()
    fixed = np.asarray(data.get("fixed", np.zeros(3)), dtype=np.float64).ravel()
    if params.size != 12 or fixed.size != 3:
        _fail(path, None, f"expected 12 parameters and 3 fixed parameters, got {params.size} "
              f"and {fixed.size}")
    return _itk_matrix(params, fixed)


# ----------------------------------------------------------------------------- plain
def _read_plain(path, lines):
    rows = []
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(rows) == 4:
            _fail(path, lineno, f"more than 4 matrix rows: {line!r}")
        rows.append(_numbers(path, lineno, line.replace(",", " ").split(), 4,
                             "numbers per row of a 4x4 matrix"))
    if len(rows) == 3:
        rows.append([0.0, 0.0, 0.0, 1.0])
    if len(rows) != 4:
        _fail(path, None, f"expected a 4x4 (or 3x4) matrix, got {len(rows)} rows")
    mat = np.array(rows, dtype=np.float64)
    if not np.allclose(mat[3], [0, 0, 0, 1]):
        _fail(path, None, f"the last row of an affine matrix must be 0 0 0 1, got "
              f"{mat[3].tolist()}")
    return mat


# ----------------------------------------------------------------------------- entry
def read_transform(path, moving=None, target=None):
    """Read an affine transform file as a moving-to-target RAS-to-RAS matrix.

    Parameters
    ----------
    path : str or os.PathLike
        An LTA (FreeSurfer), an ITK/ANTs transform (text, or ANTs' binary ``.mat`` when scipy
        is installed) or a plain 4x4 matrix file; the format is told from the contents.
    moving, target : (shape, vox2ras) pairs, optional
        Geometry of the moving and target images: a voxel-to-voxel LTA without volume info
        needs them, and an LTA whose volume info shows src = target and dst = moving is
        inverted (with a note) only when they are given.

    Returns
    -------
    matrix : ndarray (4, 4), float64
        Maps moving RAS (mm) to target RAS.
    note : str or None
        What was done beyond reading (an inverted LTA), for the user.

    Raises
    ------
    TransformError
        Unreadable, unknown or malformed files (the message names the line), unsupported
        transform types, singular ITK matrices.

    Examples
    --------
    >>> import os, tempfile
    >>> from nitorch_jit.io.transforms import read_transform
    >>> path = os.path.join(tempfile.mkdtemp(), "shift.txt")
    >>> with open(path, "w") as f:
    ...     _ = f.write("1 0 0 2\\n0 1 0 0\\n0 0 1 0\\n0 0 0 1\\n")
    >>> mat, note = read_transform(path)
    >>> mat[:3, 3].tolist(), note
    ([2.0, 0.0, 0.0], None)
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TransformError(f"{path}: transform file not found")
    with open(path, "rb") as f:
        head = f.read(4096)
    if b"\0" in head:  # binary: MATLAB v4/v5 files as ANTs writes them
        target_to_moving = _read_itk_mat(path)
        return np.linalg.inv(check_invertible(target_to_moving, path)), None
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (UnicodeDecodeError, OSError) as e:
        raise TransformError(f"{path}: cannot read it as a text transform file ({e})") from None
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    text = "\n".join(lines)
    if first.startswith("#Insight Transform File") or first.startswith("Transform:") \
            or "\nTransform:" in text:
        target_to_moving = _read_itk(path, lines)
        return np.linalg.inv(check_invertible(target_to_moving, path)), None
    if any(ln.split("#", 1)[0].strip().lower().startswith("type") and "=" in ln
           for ln in lines) or path.lower().endswith(".lta"):
        return _read_lta(path, lines, moving, target)
    return _read_plain(path, lines), None
