"""Sphinx configuration of nitorch_jit's documentation.

Build (README: Documentation):

    pip install -e ".[docs]"
    python -m sphinx -W --keep-going -b html docs docs/_build/html

Sphinx + numpydoc, as scipy and MONAI do: every public docstring is numpydoc already, so the
API reference is the docstrings themselves. The build works offline (no intersphinx inventory,
no theme or font from the network: the built-in alabaster theme with system fonts) and treats
every warning as an error (-W). Before Sphinx reads a page, the scripts of docs/tools/ write
docs/_generated/: the API and command-line pages, the benchmark tables and plots, and the
pictures of the guides.
"""
import os
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"
sys.path.insert(0, str(ROOT))  # the checkout's package, installed or not


def _generate():
    """Run the generators in fresh processes. The pictures use the pure-PyTorch kernels
    (NI_COMPILED_BACKEND=TORCH: the compiled ones give the same values, held to 1e-10 by the
    tests, and a doc build then compiles nothing)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    jobs = [("reference.py", GENERATED, {}),
            ("benchmarks.py", GENERATED / "bench", {}),
            ("figures.py", GENERATED / "figures", {"NI_COMPILED_BACKEND": "TORCH"})]
    for script, out, extra in jobs:
        subprocess.run([sys.executable, str(DOCS / "tools" / script), str(out)],
                       env=dict(env, **extra), check=True)


_generate()

project = "nitorch_jit"
author = "the nitorch_jit developers"
copyright = "2026, the nitorch_jit developers"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "tools", "Thumbs.db", ".DS_Store"]

# offline: nothing is looked up on the network
intersphinx_mapping = {}

autosummary_generate = True
autodoc_typehints = "none"       # the numpydoc Parameters sections say the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

myst_heading_anchors = 3

html_theme = "alabaster"
html_theme_options = {
    "description": "spline resampling, prefilter, resize, regularisers and solvers, "
                   "compiled on first use",
    "font_family": "sans-serif",
    "head_font_family": "sans-serif",
    "code_font_family": "monospace",
    "page_width": "1180px",
    "sidebar_width": "230px",
}
html_static_path = []
html_show_sourcelink = False


def _escape_shape_stars(app, what, name, obj, options, lines):
    """The docstrings write shapes as ``[*batch, C, *spatial]`` in their type lines and mode
    patterns as ``'grid-*'``, which help() shows as they are and reST would read as the start of
    an emphasis: escape such stars (inside square brackets or a quoted word), outside examples."""
    import re
    star = lambda m: re.sub(r"(?<!\\)\*", r"\\*", m.group(0))  # noqa: E731
    for i, line in enumerate(lines):
        if line.lstrip().startswith((">>>", "...")):
            continue
        parts = re.split(r"(``.*?``)", line)  # literal spans (odd parts) stay as they are
        for k in range(0, len(parts), 2):
            parts[k] = re.sub(r"\[[^\]`]*\]", star, parts[k])
            parts[k] = re.sub(r"'[^'\s`]*\*[^'\s`]*'", star, parts[k])
        lines[i] = "".join(parts)


def setup(app):
    # before numpydoc (priority 500) turns the sections into reST
    app.connect("autodoc-process-docstring", _escape_shape_stars, priority=100)
