"""Serve NITorch, MONAI and torch-interpol, unchanged, from nitorch_jit's kernels.

NITorch looks for its compiled backend in ``nitorch._C.spatial`` (else it falls back to
TorchScript), and MONAI for its compiled resampling in ``monai._C`` (absent from its PyPI
wheels). ``install()`` adds an import finder at the *end* of ``sys.meta_path`` that answers
those two names with modules built from ``compat.nitorch`` and ``compat.monai``. torch-interpol
(pure PyTorch, no longer compiled on torch >= 2.10) is served by swapping its functions for
ours right after its own import (``compat.interpol`` says why that route): a second finder,
at the *front*, wraps interpol's loader for that.

- a real compiled module, found by Python's own finders first, always wins;
- nothing is imported until the client asks (the modules, and our kernels, load lazily);
- nothing happens unless asked: installing nitorch_jit changes no other package (no ``.pth``).

Activation, before the client is imported (both decide their backend once, at import):

- ``nitorch_jit.compat.install(nitorch=True, monai=True, interpol=True)`` in a program;
- ``python -m nitorch_jit.compat PROGRAM [ARGS]`` (or ``nitorch-jit run ...``) runs a console
  script (``nitorch register ...``), a ``.py`` file or ``-m MODULE`` with it installed
  (``--no-nitorch``, ``--no-monai``, ``--no-interpol`` leave a client alone);
- ``python -m pytest -p nitorch_jit.compat.pytest_plugin ...`` for a test run.

Environment (the variables are the clients' own):

=============================  =================================================================
``NI_COMPILED_BACKEND``        read by NITorch and by nitorch_jit. Unset or ``C``: NITorch takes
                               ``nitorch._C.spatial``, i.e. ours; ``TS``: NITorch uses its own
                               TorchScript (and our kernels, where called, the pure-PyTorch
                               twin); ``MONAI``: NITorch takes ``monai._C``, and our own MONAI
                               backend refuses to use the shim (it would call itself).
``BUILD_MONAI=1``              MONAI's switch for its compiled paths (``USE_COMPILED``); needed
                               for MONAI to use ``monai._C`` at all.
``NI_SHOW_COMPILED_BACKEND=1`` NITorch prints its backend; nitorch_jit prints which kernels load.
=============================  =================================================================
"""
import importlib
import importlib.abc
import importlib.machinery
import sys
import threading

# served module name -> (our module, the client module whose import makes the choice)
_SERVED = {
    "nitorch": ("nitorch._C.spatial", "nitorch_jit.compat.nitorch", "nitorch._C.grid"),
    "monai": ("monai._C", "nitorch_jit.compat.monai", "monai.config"),
}
# patched package -> our module that swaps its functions after its import
_PATCHED = {"interpol": "nitorch_jit.compat.interpol"}
MARK = "__nitorch_jit_compat__"  # set on every module the finder creates
_LOCK = threading.Lock()


class _Loader(importlib.abc.Loader):
    def __init__(self, source):
        self.source = source

    def create_module(self, spec):
        return None  # a plain module

    def exec_module(self, module):
        ours = importlib.import_module(self.source)
        for name in ours.__all__:
            setattr(module, name, getattr(ours, name))
        module.__file__ = ours.__file__  # MONAI's optional_import wants a file, no __path__
        module.__doc__ = ours.__doc__
        setattr(module, MARK, True)


class CompatFinder(importlib.abc.MetaPathFinder):
    """Answers the served module names, and only those, when no other finder has.

    ``names`` maps a client's module name to the module of ours that serves it; ``install``
    fills it and puts the one finder at the end of ``sys.meta_path``.

    Examples
    --------
    >>> from nitorch_jit.compat import CompatFinder
    >>> finder = CompatFinder()
    >>> finder.find_spec("monai._C") is None   # serves nothing until told
    True
    >>> finder.names["monai._C"] = "nitorch_jit.compat.monai"
    >>> finder.find_spec("monai._C").origin
    'nitorch_jit.compat.monai'
    """

    def __init__(self):
        self.names = {}  # module name -> our module name

    def find_spec(self, fullname, path=None, target=None):
        source = self.names.get(fullname)
        if source is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(source), origin=source)


_FINDER = CompatFinder()


class _PatchingLoader(importlib.abc.Loader):
    """The client's own loader, then our module's ``after_import(module)``."""

    def __init__(self, loader, source):
        self.loader, self.source = loader, source

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        importlib.import_module(self.source).after_import(module)

    def __getattr__(self, name):  # get_resource_reader, is_package, get_source, ...
        return getattr(self.loader, name)


class PatchFinder(importlib.abc.MetaPathFinder):
    """At the front of sys.meta_path: finds a patched client (interpol) with the other
    finders and wraps its loader, so that our functions replace its own once it is loaded.

    ``names`` maps a client package to the module of ours whose ``after_import(module)``
    patches it; ``install`` fills it.

    Examples
    --------
    >>> from nitorch_jit.compat import PatchFinder
    >>> finder = PatchFinder()
    >>> finder.names.update(json="nitorch_jit.compat.interpol")
    >>> type(finder.find_spec("json").loader).__name__   # the other finders' spec, wrapped
    '_PatchingLoader'
    >>> finder.find_spec("csv") is None   # not named: left to the other finders
    True
    """

    def __init__(self):
        self.names = {}  # package name -> our module with after_import()

    def find_spec(self, fullname, path=None, target=None):
        source = self.names.get(fullname)
        if source is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, source)
                return spec
        return None


_PATCHER = PatchFinder()


def _check_patchable(package):
    """Raise if `package` is imported and a module outside it holds one of its functions."""
    if package not in sys.modules or package in _PATCHER.names:
        return
    route = importlib.import_module(_PATCHED[package])
    stale = route.stale_references()
    if stale:
        raise RuntimeError(
            f"nitorch_jit.compat.install(): {package} is already imported and "
            f"{', '.join(stale[:6])}{' ...' if len(stale) > 6 else ''} hold(s) its functions "
            f"under their own names, so they would keep calling {package}'s code while the "
            f"rest calls nitorch_jit's. Call install() before importing {package} or its "
            f"clients (NITorch, cornucopia, TorchIO), run the program with "
            f"`python -m nitorch_jit.compat PROGRAM [ARGS]`, or pass {package}=False.")


def install(nitorch=True, monai=True, interpol=True):
    """Serve ``nitorch._C.spatial``, ``monai._C`` and torch-interpol from nitorch_jit's kernels.

    Idempotent. A real compiled module of the client, where one is installed, keeps
    precedence. Must run before the client is imported: NITorch chooses its backend when
    ``nitorch._C.grid`` is imported, MONAI when ``monai.config`` is. torch-interpol's functions
    are swapped for ours when it is imported (at once if it already is; see ``patched()``).

    Parameters
    ----------
    nitorch : bool, default True
        Serve NITorch's ``nitorch._C.spatial``.
    monai : bool, default True
        Serve MONAI's ``monai._C`` (its resampling only; set ``BUILD_MONAI=1`` as well, or
        MONAI will not use it).
    interpol : bool, default True
        Serve torch-interpol (``interpol``, ``interpol.api``, ``.coeff``, ``.pushpull``, ...).

    Returns
    -------
    list[str]
        The module names substituted from now on (``patched()`` lists interpol).

    Raises
    ------
    RuntimeError
        If a client asked for has already chosen its backend in this process, or if
        interpol is imported and another module holds its functions under its own names.

    Examples
    --------
    >>> import nitorch_jit.compat
    >>> nitorch_jit.compat.install(monai=False, interpol=False)
    ['nitorch._C.spatial']
    >>> nitorch_jit.compat.uninstall()
    """
    wanted = [client for client, on in (("nitorch", nitorch), ("monai", monai)) if on]
    patched = [package for package, on in (("interpol", interpol),) if on]
    with _LOCK:
        for client in wanted:
            served, _, chooser = _SERVED[client]
            if served not in _FINDER.names and chooser in sys.modules:
                raise RuntimeError(
                    f"nitorch_jit.compat.install(): {client} has already chosen its compiled "
                    f"backend in this process ({chooser} is imported), so it would not see "
                    f"nitorch_jit. Call install() before importing {client}, or run the "
                    f"program with `python -m nitorch_jit.compat PROGRAM [ARGS]`.")
        for package in patched:
            _check_patchable(package)
        for client in wanted:
            served, source, _ = _SERVED[client]
            _FINDER.names[served] = source
        if _FINDER.names and _FINDER not in sys.meta_path:
            sys.meta_path.append(_FINDER)
        for package in patched:
            if package not in _PATCHER.names and package in sys.modules:
                importlib.import_module(_PATCHED[package]).serve()  # from now on
            _PATCHER.names[package] = _PATCHED[package]
        if _PATCHER.names and _PATCHER not in sys.meta_path:
            sys.meta_path.insert(0, _PATCHER)
        return sorted(_FINDER.names, key=lambda n: not n.startswith("nitorch"))


def uninstall():
    """Stop serving the clients' modules (modules already imported stay as they are, except
    torch-interpol, whose own functions are put back).

    Returns
    -------
    None

    Examples
    --------
    >>> import nitorch_jit.compat
    >>> nitorch_jit.compat.uninstall()
    >>> nitorch_jit.compat.served()
    []
    """
    with _LOCK:
        _FINDER.names.clear()
        if _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        for package, source in _PATCHER.names.items():
            if source in sys.modules:
                sys.modules[source].restore()  # interpol's own functions again
        _PATCHER.names.clear()
        if _PATCHER in sys.meta_path:
            sys.meta_path.remove(_PATCHER)


def served():
    """The module names the compat finder answers now.

    Returns
    -------
    list[str]
        Sorted, such as ``['monai._C', 'nitorch._C.spatial']``.

    Examples
    --------
    >>> import nitorch_jit.compat
    >>> nitorch_jit.compat.served()
    []
    """
    return sorted(_FINDER.names)


def patched():
    """The packages whose functions are swapped for ours when imported (torch-interpol).

    Returns
    -------
    list[str]
        Package names, sorted.

    Examples
    --------
    >>> import nitorch_jit.compat
    >>> nitorch_jit.compat.patched()
    []
    """
    return sorted(_PATCHER.names)


def is_compat(module):
    """Whether `module` is one of ours (a client module served by the compat finder).

    Parameters
    ----------
    module : module

    Returns
    -------
    bool

    Examples
    --------
    >>> import math, nitorch_jit.compat
    >>> nitorch_jit.compat.is_compat(math)
    False
    """
    return bool(getattr(module, MARK, False))


__all__ = ["install", "uninstall", "served", "patched", "is_compat", "CompatFinder",
           "PatchFinder"]
