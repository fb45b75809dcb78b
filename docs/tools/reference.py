"""The API and command-line reference pages, generated from the package itself.

    python docs/tools/reference.py OUTDIR

Writes OUTDIR/nitorch_jit.rst, ndimage.rst, compat.rst (one autosummary entry for every name of
each module's ``__all__``, grouped by the module that defines it, so a new public function
shows up without anyone editing a page) and OUTDIR/cli.rst (every sub-command of
``nitorch-jit`` and its options, from ``nitorch_jit.cli.build_parser``).
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

# the module that defines a public name -> its section on the API page
SECTIONS = {
    "nitorch_jit.ops.pushpull": "Resampling",
    "nitorch_jit.ops.affine": "Affine resampling without a grid",
    "nitorch_jit.ops.splinc": "Spline prefilter",
    "nitorch_jit.ops.resize": "Resizing and multigrid",
    "nitorch_jit.ops.regularisers": "Regularisers",
    "nitorch_jit.ops.solvers": "Solvers",
    "nitorch_jit.io.reslice": "Reslicing image files",
    "nitorch_jit.codes": "Bounds and orders",
    "nitorch_jit.backends.tuning": "Memory",
}
# names that are values, not functions: documented in prose (reading one may compile)
VALUES = {
    "compiled_backend": "``nitorch_jit.compiled_backend`` is ``'C'``, ``'TORCH'`` or "
                        "``'MONAI'``: the backend that serves the CPU ops. Reading it builds or "
                        "loads the core module, so it tells the truth "
                        "(see :doc:`/guide/backends`).",
}


def title(text, char):
    return f"{text}\n{char * len(text)}\n"


def module_page(modname, heading, intro, names):
    import importlib
    mod = importlib.import_module(modname)
    groups = {}
    for name in names:
        if name in VALUES:
            continue
        obj = getattr(mod, name)
        where = getattr(obj, "__module__", modname) or modname
        groups.setdefault(SECTIONS.get(where, "Other"), []).append(name)
    order = list(dict.fromkeys(list(SECTIONS.values()) + ["Other"]))
    lines = [title(heading, "="), intro, "", f".. currentmodule:: {modname}", ""]
    for name in names:
        if name in VALUES:
            lines += [VALUES[name], ""]
    for section in sorted(groups, key=order.index):
        lines += [title(section, "-"), ".. autosummary::", "   :toctree: generated", ""]
        lines += [f"   {n}" for n in groups[section]] + [""]
    return "\n".join(lines)


def option_rows(parser):
    """(flags, help) for each option and positional of a parser, --help excepted."""
    rows = []
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        flags = ", ".join(action.option_strings) or action.metavar or action.dest
        parts = [(action.help or "").replace("%(default)s", str(action.default))]
        if action.choices and not isinstance(action.choices, range):
            parts.append(f"one of: {', '.join(map(str, action.choices))}.")
        if action.default not in (None, False, argparse.SUPPRESS) and action.option_strings \
                and "default" not in parts[0]:
            parts.append(f"Default: {action.default}.")
        rows.append((flags, " ".join(p for p in parts if p)))
    return rows


def literal(text):
    return [".. code-block:: text", ""] + ["   " + line for line in text.splitlines()] + [""]


def cli_page():
    os.environ["COLUMNS"] = "92"  # argparse wraps to the terminal: the page must not depend on it
    from nitorch_jit.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    lines = [title("Command line: nitorch-jit", "="),
             "``nitorch-jit`` (also ``python -m nitorch_jit``) is installed with the package. "
             "This page is generated from its parser.", ""]
    lines += literal(parser.format_help())
    for name, p in sub.choices.items():
        lines += [title(f"nitorch-jit {name}", "-"), helps.get(name, "") or "", ""]
        if name == "run":
            # run hands its arguments to the compat runner untouched: its help is the runner's
            out = subprocess.run([sys.executable, "-m", "nitorch_jit.compat", "--help"],
                                 capture_output=True, text=True, check=True).stdout
            lines += literal(out)
            continue
        lines += literal(p.format_usage())
        rows = option_rows(p)
        if rows:
            lines += [".. list-table::", "   :header-rows: 1", "   :widths: 30 70", "",
                      "   * - option", "     - meaning"]
            for flags, text in rows:
                lines += [f"   * - ``{flags}``", f"     - {text or '(no description)'}"]
            lines.append("")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python docs/tools/reference.py OUTDIR")
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    import nitorch_jit
    import nitorch_jit.compat
    import nitorch_jit.ndimage
    pages = {
        "nitorch_jit": module_page(
            "nitorch_jit", "nitorch_jit", "Every public name of ``nitorch_jit`` "
            "(its ``__all__``), from the docstrings. Tensors are channel first "
            "(``[*batch, C, *spatial]``), grids channel last in voxels "
            "(``[*batch, *out, D]``).", nitorch_jit.__all__),
        "ndimage": module_page(
            "nitorch_jit.ndimage", "nitorch_jit.ndimage", "scipy.ndimage's spline "
            "interpolation functions on NumPy arrays, served by nitorch_jit's kernels "
            "(see :doc:`/guide/ndimage`).", nitorch_jit.ndimage.__all__),
        "compat": module_page(
            "nitorch_jit.compat", "nitorch_jit.compat", "NITorch's ``nitorch._C.spatial`` and "
            "MONAI's ``monai._C`` served by nitorch_jit's kernels (see :doc:`/guide/clients`).",
            nitorch_jit.compat.__all__),
        "cli": cli_page(),
    }
    for name, text in pages.items():
        (out / f"{name}.rst").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
