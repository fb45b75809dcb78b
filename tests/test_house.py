"""The layout rules of docs/architecture.md, checked on the source: the package root holds
only __init__, __main__, _version, cli and codes; no module imports a private name of another of our
modules; there are no import circles between our modules."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "nitorch_jit"
ROOT_MODULES = {"__init__.py", "__main__.py", "_version.py", "cli.py", "codes.py"}


def _modules():
    """{dotted name: path} of every module of the package."""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(name, level, here, is_package):
    """The absolute module of a relative import written in module `here`."""
    if level == 0:
        return name
    base = here.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _imports(modules, unknown=None):
    """[(importer, imported module, imported name or None, line)] between our modules; an
    ``alias._private`` attribute read counts as importing that private name. Imports of a
    ``nitorch_jit`` module that does not exist go to `unknown` as "path:line: text"."""
    edges = []
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        aliases = {}  # local name -> our module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                src = _resolve(node.module or "", node.level, mod, is_package)
                if not src.startswith("nitorch_jit"):
                    continue
                if src not in modules and unknown is not None:
                    unknown.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: "
                                   f"{ast.unparse(node)} (no module {src})")
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    if sub in modules:  # `from . import module`
                        edges.append((mod, sub, None, node.lineno))
                        aliases[a.asname or a.name] = sub
                    else:
                        edges.append((mod, src, a.name, node.lineno))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("nitorch_jit") and a.name not in modules \
                            and unknown is not None:
                        unknown.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: "
                                       f"{ast.unparse(node)} (no module {a.name})")
                    if a.name.startswith("nitorch_jit") and a.name in modules:
                        edges.append((mod, a.name, None, node.lineno))
                        if a.asname:
                            aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases:
                edges.append((mod, aliases[node.value.id], node.attr, node.lineno))
    return edges


def test_every_import_of_ours_resolves():
    """Every import of a nitorch_jit module names one that exists, function-level ones
    included: a wrong relative path (``from .torch_impl`` inside backends/) fails here, not
    in a user's process when the function first runs."""
    unknown = []
    _imports(_modules(), unknown)
    assert unknown == [], "imports of modules that do not exist:\n" + "\n".join(unknown)


def _private(name):
    return name is not None and name.startswith("_") and not name.startswith("__")


def test_package_root_holds_only_the_entry_modules():
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name not in ROOT_MODULES)
    assert loose == [], f"modules at the package root: {loose}; they belong in a folder"


def test_every_package_ships_in_the_wheel():
    """pyproject's package list is explicit: a new folder left out would be missing from the
    wheel (and the source-tree tests would not notice)."""
    import tomllib
    listed = set(tomllib.loads((PKG.parent / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    assert found - listed == set(), f"packages missing from pyproject.toml: {found - listed}"


def test_no_module_imports_a_private_name_of_another():
    bad = [f"{mod}:{line} uses {src}.{name}" for mod, src, name, line in _imports(_modules())
           if _private(name) and src != mod]
    assert bad == [], "\n".join(bad)


def _room(module):
    """The folder of a module (nitorch_jit.ops.pushpull -> ops), or the root module's name."""
    return module.split(".")[1] if module.count(".") else module


def _circles(graph):
    circles, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    return circles


def _graph(rooms):
    modules = _modules()
    graph = {}
    for mod, src, name, _ in _imports(modules):
        target = f"{src}.{name}" if name and f"{src}.{name}" in modules else src
        # a module's own package __init__ runs first anyway, and the package root before
        # everything: neither is an edge of a circle
        if target not in modules or target == mod or mod.startswith(target + ".") \
                or target == "nitorch_jit":
            continue
        a, b = (_room(mod), _room(target)) if rooms else (mod, target)
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    return graph


def test_no_import_circles():
    circles = _circles(_graph(rooms=False))
    assert circles == [], "\n".join(circles)


def test_no_import_circles_between_folders():
    """Rooms depend one way: e.g. ops -> backends -> jit, never back (the old backend.py
    imported ops/tuning.py while every op imported backend.py)."""
    circles = _circles(_graph(rooms=True))
    assert circles == [], "\n".join(circles)
