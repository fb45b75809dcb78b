"""torch-interpol served by nitorch_jit's kernels: interpol's own modules, with their functions
replaced by ours right after interpol is imported.

Why this route (of the three: substitute modules, patch functions, interpol's jitfields switch):

- **Patching after import** (this one). interpol itself is imported, so every name we do not
  serve (its enums ``BoundType`` / ``InterpolationType``, ``backend``, ``jit_utils``, the
  classes of ``interpol.autograd``, whatever its next release adds) stays interpol's own and
  keeps working. Only the functions that compute are swapped, by name, in the modules clients
  import them from: ``interpol`` and ``interpol.api`` (the public functions), the modules
  ``interpol.resize`` / ``interpol.restrict``, ``interpol.coeff`` and ``interpol.pushpull``
  (NITorch's imports), and the names ``interpol.autograd`` imported from those two (so that
  ``GridPull.apply`` and friends run on our kernels too). A function is swapped only when
  interpol's signature (parameter names, kinds and defaults) is the one we serve, taken from
  0.3.0; a release that changes one keeps interpol's own function for it and says so in one
  warning. Nothing of interpol's code is copied: ours are written on nitorch_jit's public
  functions (``compat.interpol_api``, ``compat.interpol_lowlevel``).
- Substituting the modules (as for ``nitorch._C.spatial``) would drop every name we do not
  know of, and the enums clients compare against.
- ``interpol.backend.jitfields = True`` sends interpol's entry points to the ``jitfields``
  package (channel-last arrays, ``order=`` arguments): two layout round trips per call, a
  ``restrict`` that passes ``reduce_sum`` (which jitfields 0.1.0 does not take), and nothing
  for ``interpol.coeff`` / ``interpol.pushpull``, which NITorch calls directly.

When: ``compat.install()`` puts a finder at the front of ``sys.meta_path`` that, for the name
``interpol`` only, finds interpol's real spec with the other finders and wraps its loader, so
that the swap happens as soon as interpol's ``__init__`` has run: also when a client imports
interpol lazily inside a function (TorchIO). If interpol is already imported, install() swaps
its functions then, unless a module outside interpol holds one of the originals under its own
name (``from interpol import grid_pull``): that would be a silent mixture, so install()
raises and names those modules. ``uninstall()`` puts interpol's functions back.
"""
import inspect
import sys
import warnings

from . import interpol_api as api
from . import interpol_lowlevel as low

PACKAGE = "interpol"
_ORIGINALS = {}  # (module name, attribute) -> interpol's object that ours replaced


def _table():
    """{module name: {attribute: our function}}: what is swapped, where."""
    public = {name: getattr(api, name) for name in api.API}
    coeff = {name: getattr(low, name) for name in low.COEFF}
    pushpull = {name: getattr(low, name) for name in low.PUSHPULL}
    return {
        "interpol": dict(public, resize=api.resize, restrict=api.restrict),
        "interpol.api": public,
        "interpol.resize": {"resize": api.resize},
        "interpol.restrict": {"restrict": api.restrict},
        "interpol.coeff": coeff,
        "interpol.pushpull": pushpull,
        "interpol.autograd": dict(coeff, **pushpull),
    }


def _params(fn):
    """Parameter names, kinds and defaults, or None if they cannot be read."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def _targets():
    """[(module, attribute, interpol's object, ours)] for the names present in the loaded
    interpol modules and not swapped yet, and the names whose signature differs."""
    out, differ = [], []
    ours_all = {id(f) for table in _table().values() for f in table.values()}
    for modname, table in _table().items():
        module = sys.modules.get(modname)
        if module is None:
            continue
        for name, ours in table.items():
            orig = module.__dict__.get(name)
            if orig is None or id(orig) in ours_all:
                continue
            if _params(orig) != _params(ours):
                differ.append(f"{modname}.{name}")
                continue
            out.append((module, name, orig, ours))
    return out, differ


def version():
    """The version of the interpol imported (or installed), or None.

    Returns
    -------
    str or None

    Examples
    --------
    >>> from nitorch_jit.compat.interpol import version
    >>> isinstance(version(), (str, type(None)))
    True
    """
    module = sys.modules.get(PACKAGE)
    if module is not None:
        return getattr(module, "__version__", "unknown")
    from importlib import metadata
    try:
        return metadata.version("torch-interpol")
    except metadata.PackageNotFoundError:
        return None


def stale_references():
    """Modules outside interpol that hold, under their own names, one of interpol's functions
    that serve() would replace: they would keep calling interpol's code.

    Returns
    -------
    list[str]
        ``module.name`` entries.

    Examples
    --------
    >>> from nitorch_jit.compat.interpol import stale_references
    >>> isinstance(stale_references(), list)
    True
    """
    targets, _ = _targets()
    originals = {id(orig) for _, _, orig, _ in targets}
    found = []
    for modname, module in list(sys.modules.items()):
        if modname == PACKAGE or modname.startswith(PACKAGE + ".") or module is None:
            continue
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        found += [f"{modname}.{k}" for k, v in list(names.items()) if id(v) in originals]
    return sorted(found)


def serve():
    """Swap interpol's functions for ours in its loaded modules (idempotent).

    Returns
    -------
    list[str]
        The ``module.name`` entries swapped by this call.

    Warns
    -----
    UserWarning
        When the loaded interpol has a function whose signature differs from the one served
        (it stays interpol's own).

    Examples
    --------
    >>> from nitorch_jit.compat.interpol import serve
    >>> serve() if 'interpol' not in __import__('sys').modules else []
    []
    """
    targets, differ = _targets()
    for module, name, orig, ours in targets:
        _ORIGINALS[(module.__name__, name)] = orig
        setattr(module, name, ours)
    if differ:
        warnings.warn(f"nitorch_jit.compat: torch-interpol {version()} changed the signature "
                      f"of {', '.join(differ)} (nitorch_jit serves those of 0.3.0); these "
                      f"stay interpol's own code, the rest runs on nitorch_jit's kernels",
                      stacklevel=2)
    return [f"{m.__name__}.{n}" for m, n, _, _ in targets]


def restore():
    """Put interpol's own functions back.

    Returns
    -------
    None
        interpol's modules hold their own functions again (an unimported module: nothing
        to do).

    Examples
    --------
    >>> from nitorch_jit.compat.interpol import restore
    >>> restore()
    """
    for (modname, name), orig in list(_ORIGINALS.items()):
        module = sys.modules.get(modname)
        if module is not None:
            setattr(module, name, orig)
    _ORIGINALS.clear()


def is_served():
    """Whether interpol is imported and its functions were swapped for ours (by identity of
    what was swapped: a profiler's wrapper around ours still counts).

    Returns
    -------
    bool

    Examples
    --------
    >>> from nitorch_jit.compat.interpol import is_served
    >>> is_served() in (True, False)
    True
    """
    return PACKAGE in sys.modules and bool(_ORIGINALS)


def after_import(module):
    """The finder's hook: interpol's ``__init__`` has run; swap its functions."""
    serve()
