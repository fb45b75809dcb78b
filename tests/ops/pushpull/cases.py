"""The data the pushpull tests share (the CPU kernels, the twin, the CUDA kernels and their
host emulation): random voxel coordinates away from the spline knots."""
import torch

F64 = torch.float64


def rand_coords(shape_out, shape_in, margin=2.5, dtype=F64, seed=0, batch=1):
    """Voxel coordinates [batch, *shape_out, D] in [-margin, n-1+margin], away from integers
    and half-integers (the knots of odd resp. even spline orders), so that float32 rounding
    cannot change the taps."""
    gen = torch.Generator().manual_seed(seed)
    D = len(shape_in)
    size = [batch, *shape_out, D]
    lo = torch.tensor([-margin] * D, dtype=F64)
    hi = torch.tensor([n - 1 + margin for n in shape_in], dtype=F64)
    base = torch.floor(lo + torch.rand(size, generator=gen, dtype=F64) * (hi - lo))
    frac = 0.03 + 0.44 * torch.rand(size, generator=gen, dtype=F64)
    frac = frac + 0.5 * (torch.rand(size, generator=gen, dtype=F64) < 0.5)
    return (base + frac).to(dtype)
