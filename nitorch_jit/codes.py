"""Boundary conditions and spline orders: the public enums and the kernels' integer codes.

This module is the one place where the codes are defined; ``ops/options.py`` (the parser of
user arguments) and the pure-PyTorch twin (``torch_impl``) import them from here. It imports
nothing from the package, so both sides can use it without an import cycle.

The kernel code of a bound is the value of its ``BoundType`` member (docs/pushpull-spec.md):
replicate 0, dct1 1, dct2 2, dst1 3, dst2 4, dft 5, zero 6. These integers are internal: the
public functions refuse a plain integer bound, because the three numberings in use disagree
(``PEER_BOUND_CODES``), and a number copied from ported code would select another bound in
silence. Spline orders are the same integers everywhere (0 nearest ... 7 seventh).
"""
import enum
import numbers


class BoundType(enum.Enum):
    """Boundary conditions, accepted by every ``bound`` argument of nitorch_jit.

    The members are named as the bounds are; the aliases (``nearest``, ``mirror``,
    ``reflect``, ``wrap``, ...) are the same members. A member can be passed wherever a name
    is, alone or in a per-dimension list.

    ========================================  ==========================  =============
    member (aliases)                          extension of ``a b c d``    scipy mode
    ========================================  ==========================  =============
    replicate (nearest, border, repeat)       ``a a [a b c d] d d``       nearest
    dct1 (mirror)                             ``c b [a b c d] c b``       mirror
    dct2 (reflect, reflection, neumann)       ``b a [a b c d] d c``       reflect
    dst1 (antimirror)                         ``-a 0 [a b c d] 0 -d``
    dst2 (antireflect, dirichlet)             ``-b -a [a b c d] -d -c``
    dft (wrap, circular)                      ``c d [a b c d] a b``       grid-wrap
    zero (zeros, constant)                    ``0 0 [a b c d] 0 0``       grid-constant
    ========================================  ==========================  =============

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> x = torch.arange(4.).reshape(1, 1, 4)
    >>> grid = torch.tensor([[[-1.], [4.]]])
    >>> nitorch_jit.grid_pull(x, grid, bound=nitorch_jit.BoundType.dct1, extrapolate=True)
    tensor([[[1., 2.]]])
    >>> nitorch_jit.BoundType.reflect is nitorch_jit.BoundType.dct2
    True
    """
    # the value is nitorch_jit's kernel code (internal; pass the member, not its value)
    replicate = nearest = border = repeat = 0
    dct1 = mirror = 1
    dct2 = reflect = reflection = neumann = 2
    dst1 = antimirror = 3
    dst2 = antireflect = dirichlet = 4
    dft = wrap = circular = 5
    zero = zeros = constant = 6


class InterpolationType(enum.Enum):
    """Spline orders, accepted by every ``interpolation`` argument of nitorch_jit.

    The value of a member is its order (0..7), the same integer in every package, so plain
    integers are accepted too. ``zeroth``, ``first``, ``second`` and ``third`` are aliases.

    Examples
    --------
    >>> import nitorch_jit
    >>> nitorch_jit.InterpolationType.cubic.value
    3
    >>> nitorch_jit.InterpolationType.first is nitorch_jit.InterpolationType.linear
    True
    """
    nearest = zeroth = 0
    linear = first = 1
    quadratic = second = 2
    cubic = third = 3
    fourth = 4
    fifth = 5
    sixth = 6
    seventh = 7


# kernel codes, for the kernels' Python twins
REPLICATE, DCT1, DCT2, DST1, DST2, DFT, ZERO = (BoundType[n].value for n in (
    "replicate", "dct1", "dct2", "dst1", "dst2", "dft", "zero"))
BOUND_NAMES = [m.name for m in sorted(BoundType, key=lambda m: m.value)]  # code -> name
BOUND_CODES = {name: m.value for name, m in BoundType.__members__.items()}  # name/alias -> code
ORDER_CODES = {name: m.value for name, m in InterpolationType.__members__.items()}

# The integer bound codes of the peers (reference/nitorch-facts.md §1.4, peer-facts.md):
# index = code. Only used to explain why a plain integer is refused.
PEER_BOUND_CODES = {
    "NITorch's C backend and MONAI": ["replicate", "dct1", "dct2", "dst1", "dst2", "dft",
                                      "sliding", "zero"],
    "torch-interpol and NITorch's TorchScript backend": ["zero", "replicate", "dct1", "dct2",
                                                         "dst1", "dst2", "dft"],
    "nitorch_jit's kernels": BOUND_NAMES,
}

# Enum members of the peers whose names mean something else than our string alias of the
# same spelling: MONAI's GridSamplePadMode / GridSampleMode (torch grid_sample's names), which
# MONAI translates for its compiled routines as reflection -> dct1 (grid_sample with
# align_corners=True reflects about the centres of the edge voxels), border -> replicate,
# zeros -> zero, and nearest / bilinear / bicubic -> orders 0 / 1 / 3.
_PEER_ENUM_BOUNDS = {"GridSamplePadMode": {"zeros": "zero", "border": "replicate",
                                           "reflection": "dct1"}}
_PEER_ENUM_ORDERS = {"GridSampleMode": {"nearest": 0, "bilinear": 1, "bicubic": 3}}
# enum classes that hold orders, not bounds (ours and the peers': the same class names)
_ORDER_ENUMS = ("InterpolationType", "GridSampleMode")
_BOUND_ENUMS = ("BoundType", "GridSamplePadMode")


def enum_member_name(value):
    """(class name, lower-case member name) of an enum member of any package, else None.

    Duck-typed, so that the peers' enums (torch-interpol's and NITorch's Python ``Enum``s,
    the pybind11 enums of NITorch's and MONAI's compiled modules, MONAI's ``StrEnum``s) are
    recognised without importing them: the class has ``__members__`` and the member a
    string ``name``.
    """
    if isinstance(value, type):
        return None
    members = getattr(type(value), "__members__", None)
    name = getattr(value, "name", None)
    if members is None or not isinstance(name, str):
        return None
    return type(value).__name__, name.lower()


def bound_code(value):
    """The kernel code of one bound: a name, a BoundType (ours or a peer's), else None.

    Plain integers return None (the caller explains why they are refused).
    """
    member = enum_member_name(value)
    if member is not None:
        cls, name = member
        if cls in _ORDER_ENUMS:
            return None
        name = _PEER_ENUM_BOUNDS.get(cls, {}).get(name, name)
        return BOUND_CODES.get(name)
    if isinstance(value, str):
        return BOUND_CODES.get(value.lower())
    return None


def order_code(value):
    """The spline order of one interpolation: an int 0..7, a name, an InterpolationType
    (ours or a peer's), else None."""
    member = enum_member_name(value)
    if member is not None:
        cls, name = member
        if cls in _BOUND_ENUMS:
            return None
        return _PEER_ENUM_ORDERS.get(cls, ORDER_CODES).get(name)
    if isinstance(value, str):
        return ORDER_CODES.get(value.lower())
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value <= 7:
        return int(value)  # NumPy integers too
    return None


def integer_bound_message(value, argname="bound"):
    """Why a plain integer bound is refused: what it would mean in each numbering."""
    meanings = []
    for owner, names in PEER_BOUND_CODES.items():
        meaning = names[value] if 0 <= value < len(names) else "nothing"
        meanings.append(f"{meaning!r} for {owner}")
    return (f"{argname}: got the integer {value!r}, which is ambiguous: the packages number "
            f"their bounds differently (NITorch's C backend and MONAI: replicate 0 ... dft 5, "
            f"zero 7; torch-interpol: zero 0, replicate 1 ... dft 6; nitorch_jit's kernels: "
            f"zero 6), so {value!r} means {'; '.join(meanings)}. Pass a name ('zero', "
            f"'replicate', 'dct1', 'dct2', 'dst1', 'dst2', 'dft', or an alias such as "
            f"'reflect' or 'wrap') or a member of nitorch_jit.BoundType "
            f"(e.g. nitorch_jit.BoundType.{BOUND_NAMES[2]}).")
