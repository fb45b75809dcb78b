"""Centred cardinal B-splines of order 0-7: weights, first and second derivatives.

Closed-form piecewise polynomials. The coefficients are derived exactly (``fractions``) at
import from the truncated-power form

    beta_o(t) = 1/o! sum_{j=0}^{o+1} (-1)^j C(o+1, j) (t + (o+1)/2 - j)_+^o

so no table is typed by hand and every derivative (including the second derivative of
orders 5-7) is the exact derivative of the weight polynomial.

Two entry points, both plain functions of tensors:

* ``spline_taps(x, order, nderiv)``: the taps used to interpolate at coordinate ``x``:
  first tap ``i0 = floor(x - (order-1)/2)`` (int64) and, for tap ``k = 0..order`` (index
  ``i0 + k``), the weight ``beta(x - i0 - k)`` and its derivatives with respect to ``x``.
  Each tap weight is one polynomial in the fractional offset ``u`` (Horner), so no piece
  selection happens per point.
* ``bspline(t, order, deriv)``: ``beta_o`` (or its ``deriv``-th derivative) at arbitrary
  offsets ``t``, zero outside the support.

A weight that is identically zero (e.g. any derivative of order 0, the second derivative of
order 1) is returned as ``None``; one that is constant as a Python float. ``mul`` multiplies
such values.
"""
from fractions import Fraction
from math import comb, factorial
import torch

MAX_ORDER = 7


def _tap_polynomials(order):
    """Exact coefficients (ascending powers of u, u in [0, 1)) of the weight of tap k.

    Tap k sits at i0 + k, so t = x - i0 - k = u + (order-1)/2 - k and
    t + (order+1)/2 - j = u + order - k - j, which is >= 0 on [0, 1) iff j <= order - k.
    """
    polys = []
    for k in range(order + 1):
        coef = [Fraction(0)] * (order + 1)
        for j in range(order - k + 1):
            m = order - k - j
            c = Fraction((-1) ** j * comb(order + 1, j), factorial(order))
            # (u + m)^order = sum_p C(order, p) m^(order-p) u^p
            for p in range(order + 1):
                coef[p] += c * comb(order, p) * m ** (order - p)
        polys.append(coef)
    return polys


def _derivative(coef):
    return [p * c for p, c in enumerate(coef)][1:]


def _trim(coef):
    coef = list(coef)
    while coef and coef[-1] == 0:
        coef.pop()
    return coef


# _POLY[order][deriv][k]: ascending float coefficients, [] when identically zero
_POLY_EXACT = []
for _o in range(MAX_ORDER + 1):
    _w = _tap_polynomials(_o)
    _dw = [_derivative(c) for c in _w]
    _ddw = [_derivative(c) for c in _dw]
    _POLY_EXACT.append([[_trim(c) for c in _w], [_trim(c) for c in _dw],
                        [_trim(c) for c in _ddw]])
_POLY = [[[[float(c) for c in p] for p in per_deriv] for per_deriv in per_order]
         for per_order in _POLY_EXACT]


def mul(a, b):
    """Product of weights that may be None (zero), a Python number or a tensor."""
    if a is None or b is None:
        return None
    if isinstance(a, (int, float)) and a == 1:
        return b
    if isinstance(b, (int, float)) and b == 1:
        return a
    return a * b


def _horner(coef, u):
    if not coef:
        return None
    if len(coef) == 1:
        return coef[0]
    acc = u * coef[-1] + coef[-2]
    for c in reversed(coef[:-2]):
        acc = acc * u + c
    return acc


def _check_order(order):
    if not 0 <= order <= MAX_ORDER:
        raise ValueError(f"spline order must be in 0..{MAX_ORDER}, got {order}")


def spline_offset(x, order):
    """(i0, u): first tap ``floor(x - (order-1)/2)`` as int64 and ``u`` in [0, 1)."""
    _check_order(order)
    y = x - 0.5 * (order - 1) if order != 1 else x
    f = torch.floor(y)
    return f.to(torch.int64), y - f


def spline_taps(x, order, nderiv=0):
    """Taps of a spline of order ``order`` at coordinates ``x`` (float tensor).

    Returns ``(i0, weights)``: ``i0`` the int64 index of the first tap; ``weights[a][k]`` the
    ``a``-th derivative (``a = 0..nderiv``, ``nderiv <= 2``) with respect to ``x`` of the
    weight of tap ``i0 + k``, ``k = 0..order``: a tensor shaped like ``x``, a Python float
    when constant, or None when identically zero.
    """
    if not 0 <= nderiv <= 2:
        raise ValueError("nderiv must be 0, 1 or 2")
    i0, u = spline_offset(x, order)
    weights = []
    for a in range(nderiv + 1):
        if order == 1 and a == 0:  # 1 - u, u: skip the generic Horner
            weights.append([1 - u, u])
        else:
            weights.append([_horner(c, u) for c in _POLY[order][a]])
    return i0, weights


def bspline(t, order, deriv=0):
    """``beta_order`` (``deriv`` = 0) or its first/second derivative at offsets ``t``.

    Zero outside the support ``|t| < (order+1)/2``. Pieces are half-open on the right, so
    at a knot the derivative is the right derivative; order 0 is 1 on [-1/2, 1/2).
    """
    _check_order(order)
    if not 0 <= deriv <= 2:
        raise ValueError("deriv must be 0, 1 or 2")
    s = t + 0.5 * (order + 1)
    p = torch.floor(s)
    u = s - p
    out = torch.zeros_like(t)
    for k, coef in enumerate(_POLY[order][deriv]):
        val = _horner(coef, u)
        if val is None:
            continue
        out = torch.where(p == order - k, val, out)
    return out
