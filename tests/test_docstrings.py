"""Every public name has a numpydoc docstring whose examples run.

Public: everything in ``nitorch_jit.__all__`` and ``nitorch_jit.ndimage.__all__``. Functions
need Parameters, Returns and Examples sections (scipy.ndimage's layout: a title line
underlined with dashes), and every parameter of the signature is described; classes (the
enums) need Examples. The examples are run with doctest.
"""
import doctest
import inspect
import re

import pytest

import nitorch_jit
from nitorch_jit import ndimage

VALUES = {"compiled_backend"}  # a value (a string read on access), not a function


def _public():
    out = [(f"nitorch_jit.{n}", getattr(nitorch_jit, n)) for n in nitorch_jit.__all__
           if n not in VALUES]
    out += [(f"nitorch_jit.ndimage.{n}", getattr(ndimage, n)) for n in ndimage.__all__]
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
            "nitorch_jit.ndimage.map_coordinates"} <= names


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_numpydoc_sections(name, obj):
    doc = obj.__doc__
    assert doc and doc.strip(), f"{name} has no docstring"
    sections = _sections(doc)
    needed = ["Examples"] if inspect.isclass(obj) else ["Parameters", "Returns", "Examples"]
    missing = [s for s in needed if s not in sections]
    assert not missing, f"{name}: docstring lacks the section(s) {missing}"
    if not inspect.isclass(obj):
        params = [p for p in inspect.signature(obj).parameters
                  if p not in ("args", "kwargs")]
        undocumented = sorted(set(params) - _documented_parameters(sections["Parameters"]))
        assert not undocumented, f"{name}: parameters not described: {undocumented}"


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_examples_run(name, obj):
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name)
             if t.examples]
    assert tests, f"{name}: no runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
