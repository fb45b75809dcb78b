"""scipy's boundary modes: the tables, the one place a mode name becomes a kernel bound code
(``mode_code``), and the two mode rules applied outside the kernels (scipy's coordinate
mapping, the padding before the prefilter). The table of the package docstring explains them.
"""
import torch

MODES = ("constant", "nearest", "reflect", "grid-mirror", "mirror", "wrap", "grid-wrap",
         "grid-constant")
# bound codes of nitorch_jit (docs/pushpull-spec.md): 0 replicate, 1 dct1, 2 dct2, 5 dft, 6 zero
TAPS = {"constant": 1, "nearest": 0, "reflect": 2, "grid-mirror": 2, "mirror": 1, "wrap": 1,
        "grid-wrap": 5, "grid-constant": 6}
# spline_filter's mode -> bound of the filter (scipy: mirror initialisation for constant,
# grid-constant, mirror and wrap; reflect for nearest and reflect; periodic for grid-wrap)
FILTER = {"constant": 1, "nearest": 2, "reflect": 2, "grid-mirror": 2, "mirror": 1, "wrap": 1,
          "grid-wrap": 5, "grid-constant": 1}
NPAD = 12  # scipy's padding before the prefilter for 'nearest' and 'grid-constant'


def mode_code(mode, spline_filter=False):
    """The bound code of nitorch_jit.codes for a scipy mode: that of the interpolation taps
    (and of the prefilter that precedes them), or with ``spline_filter=True`` that of
    ``spline_filter`` / ``spline_filter1d``. `mode` is one of MODES (checked by the caller)."""
    return (FILTER if spline_filter else TAPS)[mode]


def coefficients(x, order, mode, cval, prefilter, dim):
    """x [C, *S] -> (what the taps read, npad, whether to run the prefilter).

    The prefilter itself runs in the caller (grid_pull path) or fused in resize."""
    if mode == "grid-constant" and cval != 0:
        x = x - cval
    npad = 0
    run = bool(prefilter) and order > 1
    if run and mode in ("nearest", "grid-constant"):
        npad = NPAD
        pad = (npad,) * (2 * dim)
        if mode == "nearest":
            x = torch.nn.functional.pad(x[None], pad, mode="replicate")[0]
        else:
            x = torch.nn.functional.pad(x, pad)
    return x, npad, run


def _wrap_coordinate(c, n):
    """scipy's legacy 'wrap' mapping of a coordinate into [0, n-1], period n-1 (float64)."""
    if n <= 1:
        return torch.where(torch.isfinite(c), torch.zeros_like(c), c)
    sz = float(n - 1)
    lo = c + sz * (torch.trunc(-c / sz) + 1)
    hi = c - sz * torch.trunc(c / sz)
    return torch.where(c < 0, lo, torch.where(c > sz, hi, c))


def map_coordinate(c, n, mode):
    """scipy's map_coordinate (float64): a coordinate outside [0, n-1] mapped inside by the
    mode. Continuous splines do not need it (the bound folds the taps), but order 0 rounds
    the mapped coordinate, so its ties follow this mapping."""
    if mode == "wrap":
        return _wrap_coordinate(c, n)
    if mode not in ("mirror", "reflect", "grid-mirror", "grid-wrap"):
        return c
    if n <= 1:
        return torch.where(torch.isfinite(c), torch.zeros_like(c), c)
    if mode == "mirror":
        sz2 = float(2 * n - 2)
        lo = sz2 * torch.trunc(-c / sz2) + c
        lo = torch.where(lo <= 1 - n, lo + sz2, -lo)
        hi = c - sz2 * torch.trunc(c / sz2)
        hi = torch.where(hi >= n, sz2 - hi, hi)
    elif mode == "grid-wrap":
        lo = c + n * (torch.trunc((-1 - c) / n) + 1)
        hi = c - n * torch.trunc(c / n)
    else:
        sz2 = float(2 * n)
        lo = torch.where(c < -sz2, sz2 * torch.trunc(-c / sz2) + c, c)
        lo = torch.where(lo < -n, lo + sz2,
                         torch.where(lo > -1e-15, torch.full_like(lo, 1e-15), -lo) - 1)
        hi = c - sz2 * torch.trunc(c / sz2)
        hi = torch.where(hi >= n, sz2 - hi - 1, hi)
    return torch.where(c < 0, lo, torch.where(c > n - 1, hi, c))
