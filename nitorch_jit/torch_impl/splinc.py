"""Interpolating B-spline coefficients in pure PyTorch (the TORCH twin of csrc/splinc).

Method (Unser 1993; Thevenaz, Blu & Unser 2000): the inverse of the sampled B-spline
filter of order n factors into pairs of first-order recursions, one pair per pole z
(|z| < 1) of that filter. Per pole, with the gain (1-z)(1-1/z) applied once per pole:

    causal       c+[0] = sum_k z^k s[-k]          (s extended by the boundary condition)
                 c+[i] = s[i] + z c+[i-1]
    anti-causal  c[n-1] = closed form in c+ (depends on the extension)
                 c[i]  = z (c[i+1] - c+[i])

The boundary sums are exact (a full period of the extension divided by 1 - z^P) when the
period is shorter than the decay horizon of z, and truncated at that horizon otherwise.
The plan (poles, gain, the (index, weight) lists of both initialisations) is computed here
exactly as in csrc/lines/filter.h, so that C and TORCH agree to rounding.

Bound codes: those of nitorch_jit.codes (docs/pushpull-spec.md). As in NITorch, zero is
filtered as dct1 and replicate as dct2.

The filter is symmetric for dct2, dst1, dst2 and dft. For dct1 the interpolation matrix is
B = S W with S symmetric and W = diag(1/2, 1, ..., 1, 1/2), so the adjoint of B^-1 is
W B^-1 W^-1: scale both end samples by 2, filter, scale both end samples by 1/2.
"""
import math

import torch

from ..codes import DCT1, DCT2, DFT, DST1, DST2, REPLICATE, ZERO
from .checks import FLOATS, MAX_ORDER, NUM_BOUNDS, dtype_name

# poles of the sampled centred B-spline of order n, largest magnitude first
_POLES = {
    0: (),
    1: (),
    2: (math.sqrt(8.0) - 3.0,),
    3: (math.sqrt(3.0) - 2.0,),
    4: (-0.36134122590022017709, -0.013725429297339121360),
    5: (-0.43057534709997379185, -0.043096288203264653823),
    6: (-0.48829458930304475513, -0.081679271076237512598, -0.0014141518083258177511),
    7: (-0.53528043079643816554, -0.12255461519232669052, -0.0091486948096082769286),
}

MAX_INIT = 128           # capacity of one initialisation list (same as the C header)


def poles(order):
    return _POLES[int(order)]


def _fold(i, n, bound):
    """Index i of the extended signal -> (j, sign) in [0, n) (docs/pushpull-spec.md)."""
    if bound == DCT1:
        if n == 1:
            return 0, 1
        p = 2 * (n - 1)
        m = i % p
        return (m if m < n else p - m), 1
    if bound == DCT2:
        m = i % (2 * n)
        return (m if m < n else 2 * n - 1 - m), 1
    if bound == DST1:
        m = i % (2 * (n + 1))
        if m == n or m == 2 * n + 1:
            return 0, 0
        return (m, 1) if m < n else (2 * n - m, -1)
    if bound == DST2:
        m = i % (2 * n)
        return (m, 1) if m < n else (2 * n - 1 - m, -1)
    if bound == DFT:
        return i % n, 1
    raise ValueError(f"no spline filter for bound code {bound}")


def _period(n, bound):
    return {DCT1: 2 * (n - 1), DCT2: 2 * n, DST1: 2 * (n + 1), DST2: 2 * n, DFT: n}[bound]


def filter_bound(bound):
    """The extension the filter uses for a bound code (zero -> dct1, replicate -> dct2)."""
    bound = int(bound)
    if bound == ZERO:
        return DCT1
    if bound == REPLICATE:
        return DCT2
    if bound not in (DCT1, DCT2, DST1, DST2, DFT):
        raise ValueError(f"unknown bound code {bound}")
    return bound


def horizon(z, double):
    """Number of terms after which z^k is negligible in the working precision."""
    eps = 1e-17 if double else 1e-9
    return min(MAX_INIT - 1, int(math.ceil(math.log(eps) / math.log(abs(z)))) + 1)


def _compress(weights):
    return [(j, w) for j, w in sorted(weights.items()) if w != 0.0]


def plan(order, bound, n, double=True):
    """Per-line plan: None for the identity, else (gain, [(z, causal, anticausal), ...]).

    causal / anticausal are lists of (index, weight): c+[0] = sum w s[index] and
    c[n-1] = sum w c+[index].
    """
    zs = poles(order)
    bound = filter_bound(bound)
    n = int(n)
    if not zs or (n == 1 and bound in (DCT1, DCT2, DFT)):
        return None
    gain = 1.0
    for z in zs:
        gain *= (1.0 - z) * (1.0 - 1.0 / z)
    out = []
    for z in zs:
        K = horizon(z, double)
        P = _period(n, bound)
        exact = P <= K
        causal = {}
        zk = 1.0
        for k in range(P if exact else K):
            j, s = _fold(-k, n, bound)
            if s:
                causal[j] = causal.get(j, 0.0) + s * zk
            zk *= z
        if exact:
            scale = 1.0 / (1.0 - z ** P)
            causal = {j: w * scale for j, w in causal.items()}
        if bound == DCT1:
            a = z / (z * z - 1.0)
            anti = {n - 1: a, n - 2: a * z}
        elif bound == DCT2:
            anti = {n - 1: z / (z - 1.0)}
        elif bound == DST1:
            anti = {n - 1: -z}
        elif bound == DST2:
            anti = {n - 1: -z / (1.0 + z)}
        else:  # DFT: c[n-1] = -z sum_{m>=0} z^m c+[(n-1+m) mod n]
            exact = n <= K
            anti = {}
            zk = -z
            for m in range(n if exact else K):
                j = (n - 1 + m) % n
                anti[j] = anti.get(j, 0.0) + zk
                zk *= z
            if exact:
                scale = 1.0 / (1.0 - z ** n)
                anti = {j: w * scale for j, w in anti.items()}
        out.append((z, _compress(causal), _compress(anti)))
    return gain, out


def _filter_dim(x, order, bound, adjoint):
    """Filter x (modified in place) along its first dimension."""
    n = x.shape[0]
    p = plan(order, bound, n, x.dtype == torch.float64)
    if p is None:
        return x
    gain, steps = p
    dct1_adjoint = adjoint and filter_bound(bound) == DCT1 and n > 2
    if dct1_adjoint:
        x[0] *= 2
        x[-1] *= 2
    x *= gain
    for z, causal, anti in steps:
        x[0] = sum(w * x[j] for j, w in causal)
        for i in range(1, n):
            x[i].add_(x[i - 1], alpha=z)
        x[n - 1] = sum(w * x[j] for j, w in anti)
        for i in range(n - 2, -1, -1):
            x[i] = z * (x[i + 1] - x[i])
    if dct1_adjoint:
        x[0] *= 0.5
        x[-1] *= 0.5
    return x


# ----------------------------------------------------------------------------- arguments
# The checks of csrc/lines/checks.h, in its order and words, so that the TORCH backend refuses
# what C refuses (tests/ops/splinc/test_splinc.py and tests/ops/resize/test_resize.py hold both
# to tests/cuda/lines_cases.py::bad_calls). check_float and check_codes are the rules that
# checks.h shares between splinc and resize (the resize twin uses them from here). C's "expected
# a CPU tensor" is not checked: the twin runs on any device. No tensor op is made unless a
# check fails.
def check_float(input, name):
    """checks.h check_float (less the device): a float32 or float64 tensor."""
    if input.dtype not in FLOATS:
        raise RuntimeError(f"{name}: expected float32 or float64, got {dtype_name(input.dtype)}")


def check_codes(order, bound, name):
    """A spline order (0..7) and a bound code (0..6) of one dim, as splinc and resize check."""
    if not 0 <= order <= MAX_ORDER:
        raise RuntimeError(f"{name}: order must be in 0..{MAX_ORDER}, got {order}")
    if not 0 <= bound < NUM_BOUNDS:
        raise RuntimeError(f"{name}: unknown bound code {bound}")


def check_splinc(input, order, bound, dim, name):
    """checks.h check_splinc_args."""
    check_float(input, name)
    if not len(order) == len(bound) == len(dim):
        raise RuntimeError(f"{name}: order, bound and dim must have the same length")
    nd = input.dim()
    for o, b, d in zip(order, bound, dim):
        if not 0 <= d < nd:
            raise RuntimeError(f"{name}: dim {d} out of range")
        check_codes(o, b, name)


def check_not_expanded(input):
    """checks.h check_not_expanded: an expanded dim cannot be filtered in place."""
    if 0 in input.stride():
        for n, s in zip(input.shape, input.stride()):
            if n >= 2 and s == 0:
                raise RuntimeError("spline_coeff_nd_: input has an expanded dim (stride 0); "
                                   "use inplace=False")


# ----------------------------------------------------------------------------- ops
def spline_coeff_nd(input, order, bound, dim, adjoint):
    """Filter `input` along each dim of `dim` (order[i], bound[i] for dim[i]); new tensor."""
    check_splinc(input, order, bound, dim, "spline_coeff_nd")
    return coeff(input, order, bound, dim, adjoint)


def spline_coeff_nd_(input, order, bound, dim, adjoint):
    """In-place variant: writes the coefficients into `input`; returns nothing."""
    check_splinc(input, order, bound, dim, "spline_coeff_nd_")
    check_not_expanded(input)
    input.copy_(coeff(input, order, bound, dim, adjoint))


def coeff(input, order, bound, dim, adjoint):
    """spline_coeff_nd without the checks (for callers that made them: resize)."""
    x = input.clone(memory_format=torch.contiguous_format)
    for o, b, d in zip(order, bound, dim):
        if x.shape[d] == 0 or x.numel() == 0:
            continue
        _filter_dim(x.movedim(d, 0), o, b, adjoint)
    return x


KERNELS = {
    "spline_coeff_nd": spline_coeff_nd,
    "spline_coeff_nd_": spline_coeff_nd_,
}
