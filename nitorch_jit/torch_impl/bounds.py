"""Boundary conditions: fold an integer tap index into the volume (docs/pushpull-spec.md).

Codes: those of nitorch_jit.codes (0 replicate ... 5 dft, 6 zero). ``fold(i, n, bound)``
maps an int64 tensor of indices ``i`` on a dim of size ``n`` to ``(j, s)``: ``j`` an int64
tensor of in-range indices (always a valid index, also where ``s == 0``), and ``s`` the sign
in {-1, 0, +1}, returned as None where the bound never changes the sign (replicate, dct1,
dct2, dft), else as an int64 tensor. All remainders are the non-negative ones
(``torch.remainder``), so negative indices need no special case.
"""
import torch

from ..codes import DCT1, DCT2, DFT, DST1, DST2, REPLICATE, ZERO


def fold(i, n, bound):
    """Fold int64 indices ``i`` into ``[0, n)`` with boundary condition ``bound`` (a code)."""
    bound = int(bound)
    if bound == REPLICATE:
        return i.clamp(0, n - 1), None
    if bound == DCT1:
        if n == 1:
            return torch.zeros_like(i), None
        p = 2 * (n - 1)
        m = torch.remainder(i, p)
        return torch.minimum(m, p - m), None  # m < n iff m < p - m
    if bound == DCT2:
        p = 2 * n
        m = torch.remainder(i, p)
        return torch.minimum(m, (p - 1) - m), None  # m < n iff m < p - 1 - m
    if bound == DST1:
        m = torch.remainder(i, 2 * (n + 1))
        first = m < n
        j = torch.where(first, m, 2 * n - m).clamp(0, n - 1)  # m = 2n+1 gives -1
        s = torch.where(first, 1, -1) * ((m != n) & (m != 2 * n + 1))
        return j, s
    if bound == DST2:
        m = torch.remainder(i, 2 * n)
        first = m < n
        j = torch.where(first, m, 2 * n - 1 - m)
        return j, torch.where(first, 1, -1)
    if bound == DFT:
        return torch.remainder(i, n), None
    if bound == ZERO:
        inside = (i >= 0) & (i < n)
        return i.clamp(0, n - 1), inside.to(torch.int64)
    raise ValueError(f"unknown bound code {bound}")
