"""The arrays of the front end: the input (NumPy, array-like or torch) as a tensor without
copies where its layout allows, scipy's `output` argument, the casts of a float result to the
output dtype (scipy's rounding and clipping), and the errors of the package.
"""
import contextlib
import math
import threading
import warnings

import numpy as np
import torch


class NdimageError(ValueError, RuntimeError):
    """Bad argument. Both a ValueError and a RuntimeError (scipy raises RuntimeError)."""


class NdimageTypeError(TypeError, RuntimeError):
    """Argument of the wrong type. Both a TypeError and a RuntimeError."""


# raised by the whole package and exported by it: named as nitorch_jit.ndimage's in tracebacks
NdimageError.__module__ = NdimageTypeError.__module__ = "nitorch_jit.ndimage"


_PLANNING = threading.local()


@contextlib.contextmanager
def planning():
    """Within: the functions check their arguments and work out their result's shape and dtype,
    but compute nothing (``Output.store`` returns a placeholder). The fake kernel of the
    torch.compile path uses it at trace time."""
    _PLANNING.on = True
    try:
        yield
    finally:
        _PLANNING.on = False


def is_planning():
    """True inside ``planning()``."""
    return getattr(_PLANNING, "on", False)


class Input:
    """The input as a torch tensor (no copy where possible) and how to give results back."""

    def __init__(self, input, argname="input"):
        self.is_torch = isinstance(input, torch.Tensor)
        if self.is_torch:
            self.tensor = input.detach()
            self.np_dtype = None
            self.device = input.device
        else:
            arr = np.asarray(input)
            if arr.dtype.kind not in "biufc":
                raise NdimageTypeError(f"{argname}: expected a numeric array, got dtype "
                                       f"{arr.dtype}")
            self.np_dtype = arr.dtype
            self.tensor = from_numpy(arr)
            self.device = torch.device("cpu")
        self.shape = tuple(self.tensor.shape)
        self.ndim = len(self.shape)
        self.is_complex = self.tensor.is_complex()

    def compute_dtype(self, out_dtype):
        """float32 when both the data and the output are float32 or narrower, else float64."""
        narrow = (torch.float32, torch.float16, torch.bfloat16, torch.complex64)
        return torch.float32 if (self.tensor.dtype in narrow and out_dtype in narrow) \
            else torch.float64

    def real_parts(self, dtype, cval):
        """[(real tensor in `dtype`, real cval)] for the real part, and the imaginary one."""
        x = self.tensor
        if not self.is_complex:
            if isinstance(cval, complex):
                cval = cval.real
            return [(x.to(dtype), float(cval))]
        cval = complex(cval)
        return [(x.real.to(dtype), cval.real), (x.imag.to(dtype), cval.imag)]


def from_numpy(arr):
    """A NumPy array as a tensor sharing its memory, unless the byte order, the dtype (one torch
    lacks) or the strides (negative, or not whole items) need a copy."""
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype == np.float16 or arr.dtype.kind == "b" or arr.dtype in (
            np.float32, np.float64, np.complex64, np.complex128, np.int8, np.uint8, np.int16,
            np.int32, np.int64):
        pass
    elif arr.dtype.kind == "c":
        arr = arr.astype(np.complex128)
    else:  # uint16/32/64, longdouble: computed in float64 anyway
        arr = arr.astype(np.float64)
    if any(s < 0 for s in arr.strides) or any(s % arr.itemsize for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    with warnings.catch_warnings():  # read-only arrays: we never write into the input
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(arr)


TORCH_OF_NP = {np.dtype(k): v for k, v in [
    ("float16", torch.float16), ("float32", torch.float32), ("float64", torch.float64),
    ("complex64", torch.complex64), ("complex128", torch.complex128), ("bool", torch.bool),
    ("int8", torch.int8), ("uint8", torch.uint8), ("int16", torch.int16),
    ("int32", torch.int32), ("int64", torch.int64)]}


def torch_dtype(np_dtype):
    """The torch dtype that stands for a NumPy dtype in the compute-dtype choice."""
    return TORCH_OF_NP.get(np.dtype(np_dtype), torch.int64)


class Output:
    """scipy's `output` argument: None, an array (or tensor) to fill, a dtype or a string."""

    def __init__(self, output, inp, shape):
        shape = tuple(int(s) for s in shape)
        self.shape, self.target, self.is_torch = shape, None, inp.is_torch
        if inp.is_torch:
            self._init_torch(output, inp, shape)
        else:
            self._init_numpy(output, inp, shape)

    def _init_numpy(self, output, inp, shape):
        cplx = inp.is_complex
        if output is None:
            dtype = np.promote_types(inp.np_dtype, np.complex64) if cplx else inp.np_dtype
        elif isinstance(output, (type, np.dtype)):
            dtype = np.dtype(output)
            if cplx and dtype.kind != "c":
                warnings.warn("promoting specified output dtype to complex", stacklevel=4)
                dtype = np.promote_types(dtype, np.complex64)
        elif isinstance(output, str):
            try:
                dtype = np.dtype(output)
            except TypeError:
                raise NdimageTypeError(f"output: {output!r} is not a dtype") from None
            if cplx and dtype.kind != "c":
                raise NdimageError("output: must have a complex dtype for complex input")
            if not issubclass(dtype.type, np.number):
                raise NdimageError(f"output: must have a numeric dtype, got {dtype}")
        elif isinstance(output, np.ndarray):
            if output.shape != shape:
                raise NdimageError(f"output: output shape not correct: expected {shape}, "
                                   f"got {output.shape}")
            if cplx and output.dtype.kind != "c":
                raise NdimageError("output: must have a complex dtype for complex input")
            self.target = output
            dtype = output.dtype
        else:
            raise NdimageTypeError(f"output: expected None, a NumPy array, a dtype or a dtype "
                                   f"string, got {type(output).__name__}")
        if dtype.kind not in "biufc":
            raise NdimageTypeError(f"output: unsupported dtype {dtype}")
        self.np_dtype = dtype
        self.kind = dtype.kind
        self.torch_dtype = torch_dtype(dtype)

    def _init_torch(self, output, inp, shape):
        x = inp.tensor
        if output is None:
            dtype = x.dtype
        elif isinstance(output, torch.dtype):
            dtype = output
        elif isinstance(output, torch.Tensor):
            if tuple(output.shape) != shape:
                raise NdimageError(f"output: output shape not correct: expected {shape}, "
                                   f"got {tuple(output.shape)}")
            self.target, dtype = output, output.dtype
        elif isinstance(output, (type, np.dtype, str)):
            dtype = TORCH_OF_NP.get(np.dtype(output))
            if dtype is None:
                raise NdimageTypeError(f"output: dtype {output!r} has no torch equivalent")
        else:
            raise NdimageTypeError(f"output: expected None, a tensor or a dtype, got "
                                   f"{type(output).__name__}")
        if inp.is_complex and not dtype.is_complex:
            raise NdimageError("output: must have a complex dtype for complex input")
        self.torch_dtype = dtype
        self.kind = ("c" if dtype.is_complex else "f" if dtype.is_floating_point
                     else "b" if dtype == torch.bool else "u" if dtype == torch.uint8 else "i")

    def empty(self):
        return math.prod(self.shape) == 0

    def store(self, result):
        """Round / clip / cast a float (or complex) result like scipy, into the target.
        A new result is C-contiguous, as scipy's are: the pipelines give some back permuted
        (rotate in a leading plane, zoom / shift with unchanged axes after changed ones), and
        the compiled route promises one layout for every call (``_routes.call_op``).
        Inside ``planning()``: an array of the result's shape and dtype (no data: a broadcast
        NumPy zero, or a tensor on the meta device)."""
        if is_planning():
            if self.is_torch:
                return torch.empty(self.shape, dtype=self.torch_dtype, device="meta")
            return np.broadcast_to(np.zeros((), self.np_dtype), self.shape)
        if self.is_torch:
            out = cast_torch(result, self.torch_dtype, self.kind)
            if self.target is not None:
                self.target.copy_(out.reshape(self.shape))
                return self.target
            return out.reshape(self.shape).contiguous()
        # (the copy in torch, threaded; NumPy's casts below keep a C-contiguous layout)
        res = result.reshape(self.shape).contiguous()
        res = res.cpu().numpy() if res.device.type != "cpu" else res.numpy()
        out = cast_numpy(res, self.np_dtype)
        if self.target is not None:
            np.copyto(self.target, out, casting="unsafe")
            return self.target
        return out


def cast_numpy(res, dtype):
    """A float (or complex) NumPy result in `dtype`, as scipy casts its output."""
    if dtype.kind in "fc":
        return res if res.dtype == dtype else res.astype(dtype)
    if dtype.kind == "b":  # scipy: (npy_bool)t, a cast to unsigned char (truncation)
        with np.errstate(invalid="ignore"):
            t = np.trunc(np.nan_to_num(res, nan=0.0, posinf=0.0, neginf=0.0))
            return np.asarray(np.fmod(t, 256.0) != 0)
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        if dtype.kind == "u":
            t = np.where(res > 0, res + 0.5, 0.0)
        else:
            t = np.where(res > 0, res + 0.5, res - 0.5)
        t = np.clip(t, float(info.min), float(info.max))
        if dtype.itemsize == 8:  # 2**63 / 2**64 are not representable: saturate exactly
            big = t >= float(info.max)
            return np.asarray(np.where(big, info.max, np.trunc(t).astype(dtype)), dtype=dtype)
        return np.asarray(np.trunc(t).astype(dtype))


def cast_torch(res, dtype, kind):
    """cast_numpy for a tensor result: `dtype` a torch dtype, `kind` its NumPy kind letter."""
    if kind in "fc":
        return res.to(dtype)
    if kind == "b":  # scipy: (npy_bool)t, a cast to unsigned char (truncation)
        t = torch.nan_to_num(res, nan=0.0, posinf=0.0, neginf=0.0).trunc()
        return torch.fmod(t, 256.0) != 0
    info = torch.iinfo(dtype)
    if kind == "u":
        t = torch.where(res > 0, res + 0.5, torch.zeros_like(res))
    else:
        t = torch.where(res > 0, res + 0.5, res - 0.5)
    return t.clamp(float(info.min), float(info.max)).trunc().to(dtype)


def unaliased(res, inp):
    """A result that may share memory with the input (identity cases) is copied."""
    if is_planning():
        return res
    if res.untyped_storage().data_ptr() == inp.tensor.untyped_storage().data_ptr():
        return res.clone(memory_format=torch.contiguous_format)  # (store keeps it as is)
    return res
