"""Every public name has a numpydoc docstring whose examples run.

Public: everything in the ``__all__`` of ``nitorch_jit``, ``nitorch_jit.ndimage`` and
``nitorch_jit.compat`` (the names the API reference of docs/ shows). Functions need Parameters
(when they take any), Returns and Examples sections (scipy.ndimage's layout: a title line
underlined with dashes), and every parameter of the signature is described; classes (the
enums) need Examples. The examples run where every example of the package runs, the standard
way: ``python -m pytest --doctest-modules nitorch_jit`` (CI runs it as well as the suite), so an
example in the API reference cannot go stale; here, each public name's examples must be among
those that command finds.
"""
import doctest
import inspect
import re
from pathlib import Path

import pytest

import nitorch_jit
from nitorch_jit import compat, ndimage

VALUES = {"compiled_backend"}  # a value (a string read on access), not a function
# sections a name still lacks, by name: the owner of the module adds them and drops the entry
# (an entry for a name that is no longer public fails test_gaps_are_public)
GAPS = {}


def _public():
    out = [(f"nitorch_jit.{n}", getattr(nitorch_jit, n)) for n in nitorch_jit.__all__
           if n not in VALUES]
    for mod in (ndimage, compat):
        out += [(f"{mod.__name__}.{n}", getattr(mod, n)) for n in mod.__all__]
    return out


PUBLIC = _public()


def _sections(doc):
    """{section title: its lines} of a numpydoc docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    out, current = {}, None
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()) \
                and line.strip() and len(lines[i + 1].strip()) == len(line.strip()):
            current = line.strip()
            out[current] = []
        elif current is not None and not re.fullmatch(r"-{3,}", line.strip()):
            out[current].append(line)
    return out


def _documented_parameters(lines):
    """Names described in a Parameters section: 'a : type' or 'a, b, c : type' entries (and a
    bare 'a, b, c' line, meaning "as elsewhere")."""
    names = set()
    for line in lines:
        if not line or line[0].isspace():
            continue
        head = line.split(" : ")[0]
        names.update(n.strip().lstrip("*") for n in head.split(","))
    return names


def test_public_names_found():
    names = {n for n, _ in PUBLIC}
    assert {"nitorch_jit.grid_pull", "nitorch_jit.BoundType",
            "nitorch_jit.ndimage.map_coordinates", "nitorch_jit.compat.install"} <= names


def test_gaps_are_public():
    assert set(GAPS) <= {n for n, _ in PUBLIC}, "GAPS names a name that is not public"


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_numpydoc_sections(name, obj):
    doc = obj.__doc__
    assert doc and doc.strip(), f"{name} has no docstring"
    sections = _sections(doc)
    params = [] if inspect.isclass(obj) else [p for p in inspect.signature(obj).parameters
                                              if p not in ("args", "kwargs")]
    needed = ["Examples"] if inspect.isclass(obj) else \
        ["Parameters"] * bool(params) + ["Returns", "Examples"]
    missing = [s for s in needed if s not in sections and s not in GAPS.get(name, ())]
    assert not missing, f"{name}: docstring lacks the section(s) {missing}"
    if params:
        undocumented = sorted(set(params) - _documented_parameters(sections["Parameters"]))
        assert not undocumented, f"{name}: parameters not described: {undocumented}"


WITH_EXAMPLES = [(n, o) for n, o in PUBLIC if "Examples" not in GAPS.get(n, ())]
PACKAGE = Path(nitorch_jit.__file__).resolve().parent


def _found_by_the_standard_command(module):
    """(file, docstring) of each docstring with examples in `module`, as pytest's doctest
    plugin finds them: doctest's finder over the module (objects defined there, and their
    members). Not the line: a wrapped function's differs between the two finds."""
    return {(t.filename, t.docstring)
            for t in doctest.DocTestFinder().find(module, module.__name__) if t.examples}


@pytest.mark.parametrize("name,obj", WITH_EXAMPLES, ids=[n for n, _ in WITH_EXAMPLES])
def test_examples_are_run_by_the_standard_command(name, obj):
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name) if t.examples]
    assert tests, f"{name}: no runnable example"
    module = inspect.getmodule(obj)
    path = Path(module.__file__).resolve()
    # the command collects every module of the package but __main__.py (pytest skips those)
    assert PACKAGE in path.parents and path.name != "__main__.py", \
        f"{name}: defined in {path}, where --doctest-modules nitorch_jit does not look"
    found = _found_by_the_standard_command(module)
    missed = [t.name for t in tests if (t.filename, t.docstring) not in found]
    assert not missed, f"{name}: the examples of {missed} are not found in {module.__name__}"
