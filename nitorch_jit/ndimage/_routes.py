"""Which path a call of the front end takes.

- Eager, NumPy arrays, array-likes or torch tensors: the function itself.
- Eager, arrays of another DLPack library (anything with ``__dlpack__``: CuPy, JAX, ...):
  through torch tensors that share their memory, and back to the input's library.
- Inside ``torch.compile`` (dynamo traces NumPy code with its arrays as torch tensors): one
  custom op, ``nitorch_jit_ndimage::call``, runs the eager function inside the graph. Its fake
  kernel runs the same function under ``_arrays.planning()`` at trace time, so the argument
  checks and the result's shape and dtype are the eager function's own, from shapes, dtypes and
  Python values, never from data. Arrays travel as tensors, Python numbers as floats the graph
  is specialised on, everything else as a literal (``spec``). What cannot enter a graph (an
  ``output`` array to write into, a non-array input, ...) runs eagerly through a
  ``torch.compiler.disable``'d twin whose reason names the argument: an error under
  ``fullgraph=True``, a graph break otherwise. The op's result is a new C-contiguous tensor,
  as the fake kernel promises. Dynamo hands a NumPy result of ours back as the same kind of
  traced array as any NumPy result, whose ``.dtype`` it refuses (graph break gb0157): on
  import, ``trace_ndarray_dtype`` teaches it that attribute.
"""
import ast
import functools
import inspect
import sys

import numpy as np
import torch

from ._arrays import TORCH_OF_NP, NdimageError, NdimageTypeError, planning

# arguments that may be arrays inside a graph: the data, and the values that never set the
# result's shape (new values of these do not recompile)
DATA_PARAMS = ("input", "coordinates")
VALUE_PARAMS = ("cval", "shift", "offset", "matrix", "angle")

NP_OF_TORCH = {t: n for n, t in TORCH_OF_NP.items()}
EAGER = {}  # function name -> the eager function

# what each argument must be to enter a compiled graph (the reasons of the eager twins)
EXPECTED = {
    "input": "a NumPy array or a torch tensor",
    "coordinates": "a NumPy array or a torch tensor",
    "output": "None, a dtype or a dtype string (an array to write into is written eagerly, "
              "outside the graph)",
    "mapping": "a function that dynamo can trace, called once with the output indices as "
               "arrays",
}
for _key in VALUE_PARAMS:
    EXPECTED[_key] = "a Python number or sequence, a NumPy array or a torch tensor"


def _reason(name, key):
    what = EXPECTED.get(key, "a Python constant (a number, string, bool, dtype or a "
                             "tuple of them; an array would set the result's shape)")
    return (f"nitorch_jit.ndimage.{name}: argument '{key}' cannot enter a compiled graph as "
            f"given; under torch.compile it must be {what}. The call runs eagerly outside "
            f"the graph")


def _disabled(fn, reason):
    """torch.compiler.disable with a reason (shown in dynamo's error), where torch has it."""
    try:
        return torch.compiler.disable(fn, reason=reason)
    except TypeError:  # an older torch: no reason argument
        return torch.compiler.disable(fn)


def _is_foreign(value):
    """An array of another DLPack library (not NumPy's, not torch's)."""
    return not isinstance(value, (np.ndarray, torch.Tensor, type)) and \
        hasattr(value, "__dlpack__")


def entry(fn):
    """The public function `fn` with its three routes (eager, DLPack, torch.compile)."""
    name = fn.__name__
    params = inspect.signature(fn).parameters
    names = tuple(params)
    defaults = {k: p.default for k, p in params.items() if p.default is not p.empty}
    EAGER[name] = fn

    def eager(*args, **kwargs):
        if any(_is_foreign(a) for a in args) or any(_is_foreign(v) for v in kwargs.values()):
            return _foreign(fn, names, args, kwargs)
        return fn(*args, **kwargs)
    twins = {k: _disabled(eager, _reason(name, k)) for k in names}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if torch.compiler.is_compiling():
            return _traced(name, names, defaults, twins, args, kwargs)
        return eager(*args, **kwargs)
    return call


# ============================================================================ DLPack
def _foreign(fn, names, args, kwargs):
    bound = dict(zip(names, args))
    bound.update(kwargs)
    like = bound.get("input")
    if _is_foreign(bound.get("output")):
        raise NdimageTypeError(f"output: an array to write into must be a NumPy array or a "
                               f"torch tensor, got {type(bound['output']).__name__} (pass a "
                               f"dtype instead)")
    for key, value in bound.items():
        if _is_foreign(value):
            bound[key] = torch.from_dlpack(value)
    res = fn(**bound)
    return to_library(res, like) if _is_foreign(like) else res


def to_library(tensor, like):
    """`tensor` as an array of `like`'s library (through DLPack, no copy): its array-API
    namespace's ``from_dlpack``, else its top-level module's; else the tensor itself."""
    space = getattr(like, "__array_namespace__", None)
    module = space() if space is not None else sys.modules.get(type(like).__module__
                                                               .split(".")[0])
    from_dlpack = getattr(module, "from_dlpack", None)
    return tensor if from_dlpack is None else from_dlpack(tensor)


# ============================================================================ torch.compile
def _encode(value, arrays, numbers):
    """`value` as a literal for ``spec`` (arrays and numbers by index), or raise KeyError."""
    if isinstance(value, np.ndarray):
        arrays.append(torch.from_numpy(value))
        return {"array": len(arrays) - 1, "numpy": True}
    if isinstance(value, torch.Tensor):
        arrays.append(value.detach())  # (no gradient, as eager)
        return {"array": len(arrays) - 1, "numpy": False}
    # NumPy's scalars become plain literals (their repr is not one: np.str_('nearest'))
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, complex):
        return complex(value)
    if isinstance(value, (int, np.integer)):
        numbers.append(float(value))
        return {"int": len(numbers) - 1}
    if isinstance(value, (float, np.floating)):
        numbers.append(float(value))
        return {"float": len(numbers) - 1}
    if isinstance(value, torch.dtype):
        return {"torch_dtype": str(value).split(".")[-1]}
    if isinstance(value, (np.dtype, type)):
        return {"dtype": np.dtype(value).name}
    if isinstance(value, (tuple, list)):
        return tuple(_encode(v, arrays, numbers) for v in value)
    raise KeyError(value)


def _traced(name, names, defaults, twins, args, kwargs):
    bound = dict(defaults)
    bound.update(zip(names, args))
    bound.update(kwargs)
    inp = bound["input"]
    if not isinstance(inp, (np.ndarray, torch.Tensor)):
        return twins["input"](*args, **kwargs)
    if isinstance(bound.get("output"), (np.ndarray, torch.Tensor)):
        return twins["output"](*args, **kwargs)
    if name == "geometric_transform":
        return _traced_geometric(bound, twins, args, kwargs)
    arrays, numbers, spec = [], [], {}
    for key, value in bound.items():
        if isinstance(value, (np.ndarray, torch.Tensor)) and key not in DATA_PARAMS \
                and key not in VALUE_PARAMS:
            return twins[key](*args, **kwargs)
        try:
            spec[key] = _encode(value, arrays, numbers)
        except KeyError:
            return twins[key](*args, **kwargs)
    res = call_op(name, arrays, numbers, repr(spec))
    return res.numpy() if isinstance(inp, np.ndarray) else res


def _traced_geometric(bound, twins, args, kwargs):
    """geometric_transform in a graph: `mapping` called once, on the output indices as
    arrays (NumPy input: int64 arrays, as np.indices gives them; torch input: float64
    tensors), then map_coordinates."""
    inp, mapping = bound["input"], bound["mapping"]
    if not callable(mapping):
        return twins["mapping"](*args, **kwargs)
    oshape = bound["output_shape"]
    oshape = tuple(inp.shape) if oshape is None else tuple(oshape)
    extra = bound["extra_keywords"] or {}
    if isinstance(inp, np.ndarray):
        coords = mapping(tuple(np.indices(oshape)), *bound["extra_arguments"], **extra)
        coords = np.stack([np.broadcast_to(np.asarray(c, dtype=np.float64), oshape)
                           for c in coords])
    else:
        # (float64: torch makes int64 * float float32, where NumPy makes it float64)
        idx = torch.meshgrid(*[torch.arange(n, dtype=torch.float64, device=inp.device)
                               for n in oshape], indexing="ij")
        coords = mapping(tuple(idx), *bound["extra_arguments"], **extra)
        coords = torch.stack([torch.as_tensor(c, dtype=torch.float64, device=inp.device)
                              .expand(oshape) for c in coords])
    keys = ("output", "order", "mode", "cval", "prefilter")
    return _traced("map_coordinates", ("input", "coordinates") + keys,
                   {k: bound[k] for k in keys}, twins, (inp, coords), {})


def trace_ndarray_dtype():
    """Let dynamo trace ``.dtype`` on the NumPy arrays it traces (returns whether it can).

    torch 2.13's ``NumpyNdarrayVariable.var_getattr`` traces ``shape``, ``ndim``, ``size``
    and ``itemsize`` from the array's example tensor, but breaks the graph on ``dtype``
    (gb0157) on every traced ndarray, ours or NumPy's: a NumPy function's ``dtype=v.dtype``
    after one of our calls broke the graph. The dtype is as static as ``itemsize`` (the
    example tensor's, guarded with it), so it becomes a constant NumPy dtype, the variable
    dynamo itself makes of ``np.dtype(...)``. Other attributes, and dtypes NumPy lacks
    (bfloat16), keep dynamo's own answer. Process-wide, once; a torch without these classes
    is left as it is."""
    try:
        from torch._dynamo.variables.misc import NumpyDTypeVariable
        from torch._dynamo.variables.tensor import NumpyNdarrayVariable
    except ImportError:
        return False
    original = NumpyNdarrayVariable.var_getattr
    if getattr(original, "nitorch_jit_dtype", False):
        return True

    class TracedDtype(NumpyDTypeVariable):
        def reconstruct(self, codegen):
            # a dtype the compiled function returns (or keeps past a break): a global of the
            # frame, as dynamo reconstructs torch objects (NumPy's dtypes are singletons)
            codegen.extend_output(codegen.setup_globally_cached(
                f"__nitorch_jit_np_{self.value.name}", self.value))

    def var_getattr(self, tx, name):
        if name == "dtype":
            example = self.as_proxy().node.meta.get("example_value")
            dtype = NP_OF_TORCH.get(getattr(example, "dtype", None))
            if dtype is not None:
                return TracedDtype(dtype)
        return original(self, tx, name)
    var_getattr.nitorch_jit_dtype = True
    NumpyNdarrayVariable.var_getattr = var_getattr
    return True


trace_ndarray_dtype()


def _standin(key, t, is_numpy, spec):
    """At trace time, what the eager function sees for an array argument: the data as a
    placeholder (its shape and dtype, no data); a value as one that passes every check."""
    if key in DATA_PARAMS:
        if is_numpy:
            return np.broadcast_to(np.zeros((), NP_OF_TORCH[t.dtype]), tuple(t.shape))
        return torch.empty(tuple(t.shape), dtype=t.dtype, device="meta")
    if key == "angle" and spec.get("reshape", True):
        raise NdimageError("angle: an array angle with reshape=True would set the output "
                           "shape from data; under torch.compile pass a Python number or "
                           "reshape=False")
    shape = tuple(t.shape)
    if key == "matrix" and len(shape) == 2:
        return np.eye(*shape)
    return np.ones(shape) if key == "matrix" else np.zeros(shape)


def _decode(spec, arrays, numbers, fake):
    """The keyword arguments of the eager function from the op's arguments."""
    spec = ast.literal_eval(spec)

    def value(key, v):
        if isinstance(v, tuple):
            return tuple(value(key, u) for u in v)
        if not isinstance(v, dict):
            return v
        if "int" in v:
            return int(numbers[v["int"]])
        if "float" in v:
            return float(numbers[v["float"]])
        if "dtype" in v:
            return np.dtype(v["dtype"])
        if "torch_dtype" in v:
            return getattr(torch, v["torch_dtype"])
        t = arrays[v["array"]]
        if fake:
            return _standin(key, t, v["numpy"], spec)
        if key in VALUE_PARAMS:
            return t.detach().cpu().numpy()  # a few numbers, read on the host
        if v["numpy"] and t.device.type == "cpu":
            return t.detach().numpy()  # NumPy data on the CPU: the NumPy path, exactly
        return t
    return {key: value(key, v) for key, v in spec.items()}


@torch.library.custom_op("nitorch_jit_ndimage::call", mutates_args=())
def call_op(name: str, arrays: list[torch.Tensor], numbers: list[float],
            spec: str) -> torch.Tensor:
    """The eager function `name` on the decoded arguments, as a new C-contiguous tensor:
    the layout the fake kernel promises, whatever the function's own (the fake sees shapes,
    never the real layouts; the eager results are C-contiguous already, as scipy's)."""
    res = EAGER[name](**_decode(spec, arrays, numbers, fake=False))
    if isinstance(res, np.ndarray):
        res = torch.from_numpy(res)
    if not res.is_contiguous() or any(  # a custom op's output may not alias its inputs
            res.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
            for a in arrays):
        res = res.clone(memory_format=torch.contiguous_format)
    return res


@call_op.register_fake
def _call_fake(name, arrays, numbers, spec):
    with planning():
        res = EAGER[name](**_decode(spec, arrays, numbers, fake=True))
    if isinstance(res, np.ndarray):
        dtype = TORCH_OF_NP.get(res.dtype)
        if dtype is None:
            raise NdimageTypeError(f"output: dtype {res.dtype} has no torch equivalent; "
                                   f"under torch.compile the result is a tensor first")
    else:
        dtype = res.dtype
    return arrays[0].new_empty(tuple(res.shape), dtype=dtype)
