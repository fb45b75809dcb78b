"""One docstring filler for the package: shared parameter text written once, in ``DOCS``,
and placed by ``docfill`` where a docstring line holds only ``%(name)s``.

The text is re-indented to the marker's indentation, so an entry can be a whole parameter
block (ndimage's sampling parameters) or the description under a parameter line (the
resampling options of the ops). Front ends add their own entries with ``register``.
"""
import re
import textwrap

DOCS = {
    "interpolation": """\
Spline order: 0..7, a name ('nearest', 'linear', 'quadratic', 'cubic',
'fourth', 'fifth', 'sixth', 'seventh') or a member of nitorch_jit.InterpolationType
(or a peer package's, read by its name). A list gives one per spatial dim; the
last one repeats.""",
    "bound": """\
Boundary condition: a name ('zero', 'replicate', 'dct1', 'dct2', 'dst1',
'dst2', 'dft', or an alias such as 'reflect', 'mirror', 'wrap': see
nitorch_jit.BoundType) or a BoundType member; those of torch-interpol, NITorch and
MONAI are read by their names. A list gives one per spatial dim; the last one
repeats. A plain integer is refused: the packages number their bounds differently.""",
    "extrapolate": """\
If False, a point farther than 0.05 voxel outside ``[0, n - 1]`` along
some dim is out: pulling there gives 0, pushing from there adds nothing. If True,
the bound extends the image everywhere.""",
    "prefilter": """\
If True, `input` holds samples and the spline prefilter is applied
first, so that the spline interpolates them (orders >= 2); if False, `input` holds
the spline coefficients themselves.""",
}
# the option block of the resampling functions, and of their code-level entries
DOCS["resampling_options"] = "\n".join([
    "interpolation : int, str or InterpolationType, or a list of them, default 'linear'",
    textwrap.indent(DOCS["interpolation"], "    "),
    "bound : str or BoundType, or a list of them, default 'zero'",
    textwrap.indent(DOCS["bound"], "    "),
    "extrapolate : bool, default False",
    textwrap.indent(DOCS["extrapolate"], "    ")])
DOCS["code_options"] = """\
order : list[int]
    Spline orders 0..7, one per spatial dim.
bound : list[int]
    Bound codes of nitorch_jit.codes, one per spatial dim.
extrapolate : bool
prefilter : bool, default False"""

_MARKER = re.compile(r"^( *)%\((\w+)\)s$", re.MULTILINE)


def register(**entries):
    """Add shared docstring entries (name -> text, unindented); returns nothing.

    Examples
    --------
    >>> from nitorch_jit.ops import docfill
    >>> docfill.register(example_entry="Some shared text.")
    >>> "example_entry" in docfill.DOCS
    True
    """
    for name, text in entries.items():
        if name in DOCS and DOCS[name] != text:
            raise ValueError(f"docstring entry {name!r} is already defined differently")
        DOCS[name] = text


def docfill(fn):
    """Replace each ``%(name)s`` line of `fn`'s docstring by ``DOCS[name]``, indented as the
    marker; returns `fn`. An unknown name raises KeyError naming it.

    Examples
    --------
    >>> from nitorch_jit.ops.docfill import docfill
    >>> @docfill
    ... def f(bound):
    ...     '''Parameters
    ...     ----------
    ...     bound : str
    ...         %(bound)s
    ...     '''
    >>> f.__doc__.split()[2:7]   # the marker's line now holds DOCS['bound'], indented as it
    ['bound', ':', 'str', 'Boundary', 'condition:']
    """
    if fn.__doc__:
        def fill(m):
            indent, name = m.group(1), m.group(2)
            if name not in DOCS:
                raise KeyError(f"{fn.__qualname__}: no shared docstring entry {name!r}")
            return textwrap.indent(DOCS[name], indent)
        fn.__doc__ = _MARKER.sub(fill, fn.__doc__)
    return fn
