"""Every public name has a numpydoc docstring whose examples run.

Public: everything in the ``__all__`` of ``nitorch_jit``, ``nitorch_jit.ndimage`` and
``nitorch_jit.compat`` (the names the API reference of docs/ shows). Functions need Parameters
(when they take any), Returns and Examples sections (scipy.ndimage's layout: a title line
underlined with dashes), and every parameter of the signature is described; classes (the
enums) need Examples. The examples are run with doctest, so an example in the API reference
cannot go stale.
"""
import doctest
import inspect
import re

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


@pytest.mark.parametrize("name,obj", WITH_EXAMPLES, ids=[n for n, _ in WITH_EXAMPLES])
def test_examples_run(name, obj):
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name)
             if t.examples]
    assert tests, f"{name}: no runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
