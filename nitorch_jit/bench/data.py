"""The workloads the benchmarks share: volumes, grids, affines, registration-like systems.

Every maker is seeded, so that each contender of a run (and each run) sees the same data.
"""
import math

import torch

# the regulariser of the solver benchmarks (issue #9): membrane, bending, lame (mu, lambda)
REG_KW = dict(membrane=1e-3, bending=0.1, lame=(0.05, 0.2))
# the image of the reslice benchmarks: a 1 mm 256x256x176 head-sized volume
RESLICE_SHAPE = (256, 256, 176)


def synthetic(size, dim=3, dtype=torch.float32, device="cpu", disp=2.0, channels=1, seed=0):
    """A random volume and a grid: identity + uniform(-disp, disp) voxels (independent).

    Parameters
    ----------
    size : int or list[int]
        Edge of the volume (size^dim), or its spatial shape.
    dim : int
        Number of spatial dims (when `size` is an int).
    dtype : torch.dtype
    device : str or torch.device
    disp : float
        Largest displacement, in voxels.
    channels : int
    seed : int

    Returns
    -------
    img : torch.Tensor
        [1, channels, *shape], standard normal.
    grid : torch.Tensor
        [1, *shape, dim] voxel coordinates (tensor order).

    Examples
    --------
    >>> from nitorch_jit.bench.data import synthetic
    >>> img, grid = synthetic(8, 2, channels=3)
    >>> tuple(img.shape), tuple(grid.shape)
    ((1, 3, 8, 8), (1, 8, 8, 2))
    """
    from ..ops.pushpull import identity_grid
    g = torch.Generator().manual_seed(seed)
    shape = [int(s) for s in size] if isinstance(size, (list, tuple)) else [size] * dim
    dim = len(shape)
    img = torch.randn([1, channels] + shape, generator=g, dtype=dtype).to(device)
    grid = identity_grid(shape, dtype=dtype) + (torch.rand(shape + [dim], generator=g,
                                                           dtype=dtype) * 2 - 1) * disp
    return img, grid.unsqueeze(0).to(device)


def smooth_grid(n, device="cpu", disp=2.0, seed=0):
    """identity + a smooth random displacement within +-disp voxels, on an n^3 grid.

    The field is the trilinear upsampling of a 9^3 random field: neighbouring points move
    together, as in registration.

    Parameters
    ----------
    n : int
    device : str or torch.device
    disp : float
    seed : int

    Returns
    -------
    torch.Tensor
        [1, n, n, n, 3] float32 voxel coordinates.

    Examples
    --------
    >>> from nitorch_jit.bench.data import smooth_grid
    >>> tuple(smooth_grid(6).shape)
    (1, 6, 6, 6, 3)
    """
    from ..ops.pushpull import identity_grid
    gen = torch.Generator().manual_seed(seed)
    coarse = (torch.rand(1, 3, 9, 9, 9, generator=gen) * 2 - 1) * disp
    field = torch.nn.functional.interpolate(coarse.to(device), size=(n, n, n),
                                            mode="trilinear", align_corners=True)
    return identity_grid([n] * 3, torch.float32, device).unsqueeze(0) + \
        field.permute(0, 2, 3, 4, 1)


def voxel_to_grid_sample(grid, shape):
    """Voxel coordinates (tensor order) -> grid_sample's [-1, 1] coordinates (x = last dim).

    Parameters
    ----------
    grid : torch.Tensor
        [..., D] voxel coordinates.
    shape : list[int]
        The D spatial dims of the sampled image.

    Returns
    -------
    torch.Tensor
        [..., D], for ``grid_sample(..., align_corners=True)``.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.bench.data import voxel_to_grid_sample
    >>> voxel_to_grid_sample(torch.tensor([[0.0, 4.0]]), [3, 5])
    tensor([[ 1., -1.]])
    """
    scale = torch.tensor([2.0 / (s - 1) for s in shape], dtype=grid.dtype, device=grid.device)
    return (grid * scale - 1).flip(-1)


def affine_matrix(shape, degrees=10.0, zoom=1.0, shift=(0.0, 0.0, 0.0), dtype=torch.float32,
                  device=None):
    """Output voxel -> input voxel: a rotation about the last axis through the centre of
    `shape`, a zoom, and a shift (voxels).

    Parameters
    ----------
    shape : list[int]
        3-D shape (the centre of rotation is its middle).
    degrees : float
    zoom : float
        The input is sampled 1/zoom apart (zoom > 1 magnifies).
    shift : list[float]
    dtype : torch.dtype
    device : str or torch.device, optional

    Returns
    -------
    torch.Tensor
        [3, 4].

    Examples
    --------
    >>> from nitorch_jit.bench.data import affine_matrix
    >>> A = affine_matrix([9, 9, 9], degrees=0, shift=(1, 0, 0))
    >>> A[:, 3].tolist()
    [1.0, 0.0, 0.0]
    """
    a = math.radians(degrees)
    rot = torch.tensor([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0],
                        [0, 0, 1]], dtype=torch.float64) / zoom
    c = (torch.tensor(shape, dtype=torch.float64) - 1) / 2
    off = c - rot @ c + torch.tensor(shift, dtype=torch.float64)
    return torch.cat([rot, off[:, None]], 1).to(dtype=dtype, device=device)


def _pack(full):
    return torch.cat([full[..., [0, 1, 2], [0, 1, 2]], full[..., [0, 0, 1], [1, 2, 2]]], -1)


def registration_data(size, seed=0, hessian="registration"):
    """A displacement problem as registration makes it: v, g [1, *S, 3] and a packed Hessian
    [1, *S, 6] (float32, S = size^3).

    Parameters
    ----------
    size : int
    seed : int
    hessian : {'registration', 'gauss-newton', 'random'}
        'gauss-newton': the Gauss-Newton Hessian of registration, the outer product of the
        gradient of a smooth random image I (noise blurred three times by a 5^3 box, unit
        variance) with itself: rank 1 in every voxel. 'registration' (the workload): the same,
        zero outside a centred ball of radius 0.35 size, as when an object (a head) fills part
        of the field of view: there the regulariser alone holds the smooth modes, which is
        what multigrid is for and what makes PCG slow. 'random': a a^T + 0.01 I with
        a ~ 0.1 N(0, 1), full rank everywhere: well conditioned.

    Returns
    -------
    v, g, h : torch.Tensor

    Examples
    --------
    >>> from nitorch_jit.bench.data import registration_data
    >>> v, g, h = registration_data(8)
    >>> tuple(v.shape), tuple(h.shape)
    ((1, 8, 8, 8, 3), (1, 8, 8, 8, 6))
    """
    g = torch.Generator().manual_seed(seed)
    shape = [size] * 3
    v = torch.randn(shape + [3], generator=g)
    grad = torch.randn(shape + [3], generator=g)
    if hessian == "random":
        a = torch.randn(shape + [3, 3], generator=g) * 0.1
        h = _pack(a @ a.transpose(-1, -2) + 1e-2 * torch.eye(3))
    else:
        img = torch.randn([1, 1] + shape, generator=g)
        for _ in range(3):
            img = torch.nn.functional.avg_pool3d(
                torch.nn.functional.pad(img, [2] * 6, mode="circular"), 5, stride=1)
        img = (img / img.std())[0, 0]
        grad_img = torch.stack([(img.roll(-1, d) - img.roll(1, d)) / 2 for d in range(3)], -1)
        h = _pack(grad_img[..., :, None] * grad_img[..., None, :])
        if hessian == "registration":
            ax = torch.arange(size) - (size - 1) / 2
            r = (ax[:, None, None] ** 2 + ax[None, :, None] ** 2 + ax[None, None, :] ** 2).sqrt()
            h = h * (r < 0.35 * size)[..., None]
    return v[None], grad[None], h[None].contiguous()


def conv_operator(kw=None):
    """The grid regulariser (bound dft) as conv3d weights, the way a user without our kernels
    would write it: a grouped 5^3 kernel [3, 1, 5, 5, 5] (the per-component terms) and a 3->3
    channel 3^3 kernel [3, 3, 3, 3, 3] (the elastic cross terms).

    Parameters
    ----------
    kw : dict, optional
        membrane / bending / lame of ``regulariser_grid``. Default: REG_KW.

    Returns
    -------
    diag, cross : torch.Tensor

    Examples
    --------
    >>> from nitorch_jit.bench.data import conv_operator, conv_regulariser, registration_data
    >>> diag, cross = conv_operator()  # doctest: +SKIP
    >>> v = registration_data(8)[0]
    >>> tuple(conv_regulariser(v, diag, cross).shape)  # doctest: +SKIP
    (1, 8, 8, 8, 3)
    """
    from ..ops.regularisers import regulariser_grid
    kw = REG_KW if kw is None else kw
    n = 9
    diag = torch.zeros(3, 1, 5, 5, 5)
    cross = torch.zeros(3, 3, 3, 3, 3)
    for src in range(3):
        e = torch.zeros(1, n, n, n, 3, dtype=torch.float64)
        e[0, 4, 4, 4, src] = 1
        col = regulariser_grid(e, bound="dft", **kw)[0]  # column: out[dst] at offsets
        # conv3d is a correlation: weight[dst, src, k] multiplies x[src, i + k - r]; the
        # operator is symmetric, so its row at the centre is this column flipped
        diag[src, 0] = col[2:7, 2:7, 2:7, src].flip([0, 1, 2]).float()
        for dst in range(3):
            if dst != src:
                cross[dst, src] = col[3:6, 3:6, 3:6, dst].flip([0, 1, 2]).float()
    return diag, cross


def conv_regulariser(v, diag, cross):
    """Apply :func:`conv_operator`'s weights to a grid v [1, *S, 3] (circular padding)."""
    x = v[0].movedim(-1, 0)[None]
    out = torch.nn.functional.conv3d(torch.nn.functional.pad(x, [2] * 6, mode="circular"),
                                     diag, groups=3)
    out = out + torch.nn.functional.conv3d(torch.nn.functional.pad(x, [1] * 6, mode="circular"),
                                           cross)
    return out[0].movedim(0, -1)[None]


def reslice_workload(shape=RESLICE_SHAPE, seed=0):
    """A smooth image with detail and two 1 mm grids: the moving one centred, the target one
    rotated by 10 degrees about z and shifted by (3.3, -2.1, 1.7) mm.

    Parameters
    ----------
    shape : tuple[int]
    seed : int

    Returns
    -------
    data : numpy.ndarray
        float32, Fortran order (the layout nibabel reads from disk): a sum of four random
        low-frequency waves plus 0.1 noise.
    moving_aff, target_aff : numpy.ndarray
        [4, 4] voxel -> RAS mm.

    Examples
    --------
    >>> from nitorch_jit.bench.data import reslice_workload
    >>> data, moving, target = reslice_workload((8, 8, 6))
    >>> data.shape, data.dtype.name, moving.shape
    ((8, 8, 6), 'float32', (4, 4))
    """
    import numpy as np
    rng = np.random.default_rng(seed)
    axes = [np.linspace(0, 1, s, dtype=np.float32) for s in shape]
    data = np.zeros(shape, np.float32)
    for _ in range(4):
        f = rng.uniform(1, 8, 3)
        data += np.sin(f[0] * 6.28 * axes[0])[:, None, None] * \
            np.cos(f[1] * 6.28 * axes[1])[None, :, None] * np.sin(f[2] * 6.28 * axes[2])
    data += 0.1 * rng.standard_normal(shape).astype(np.float32)
    data = np.asfortranarray(data)
    moving_aff = np.eye(4)
    moving_aff[:3, 3] = -(np.array(shape) - 1) / 2
    t = np.deg2rad(10)
    rot = np.eye(4)
    rot[:2, :2] = [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]
    target_aff = rot @ moving_aff
    target_aff[:3, 3] += [3.3, -2.1, 1.7]
    return data, moving_aff, target_aff
