"""The package's layers import in one direction only (README, Layout):

    session, cli, migrate, testing, shipping (the facade and entry points)
      -> streaming -> sql -> engines -> runtime -> state -> compat -> api

and ``api`` imports nothing from Spark. Outside ``engines/`` nothing names an engine: no module
compares with an engine's name or imports an engine's own module. No Spark needed."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "spark_keyed_sql"
LAYERS = ["api", "compat", "state", "runtime", "engines", "sql", "streaming"]  # bottom to top; the rest is the top
TOP = len(LAYERS)


def layer_of(module: str) -> int:
    """'spark_keyed_sql.engines.bulk.stream' -> the index of 'engines'."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return TOP


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import of this package in ``path``."""
    tree = ast.parse(path.read_text())
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("spark_keyed_sql"):
                # `from . import x` imports submodule x
                names = [f"{target}.{a.name}" for a in node.names] if not node.module else [target]
                out += [(n, node.lineno) for n in names]
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("spark_keyed_sql")]
    return out


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_imports_point_down_the_layers():
    offences = []
    for path in sources():
        mine = layer_of(module_name(path))
        for target, line in imports(path):
            if layer_of(target) > mine:
                offences.append(
                    f"{path.relative_to(PACKAGE)}:{line} imports {target} ({LAYERS[mine] if mine < TOP else 'top'} -> "
                    f"{LAYERS[layer_of(target)] if layer_of(target) < TOP else 'top'})"
                )
    assert offences == [], "\n".join(offences)


def test_api_imports_no_spark():
    for path in (PACKAGE / "api").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.startswith(("pyspark", "py4j")) for n in names), f"{path.name} imports {names}"


def test_engine_names_appear_only_in_the_engines():
    """No module outside engines/ imports an engine's own module or compares with an engine's
    name: it goes through the registry and the declared capabilities."""
    from spark_keyed_sql.engines import ENGINES

    own = {f"spark_keyed_sql.engines.{name}" for name in ENGINES}
    offences = []
    for path in sources():
        if layer_of(module_name(path)) == LAYERS.index("engines"):
            continue
        for target, line in imports(path):
            if any(target == o or target.startswith(o + ".") for o in own):
                offences.append(f"{path.relative_to(PACKAGE)}:{line} imports {target}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    if isinstance(side, ast.Constant) and side.value in ENGINES:
                        offences.append(
                            f"{path.relative_to(PACKAGE)}:{node.lineno} compares with engine name {side.value!r}"
                        )
    assert offences == [], "\n".join(offences)


def test_the_package_and_keyed_tester_import_without_pyspark():
    """KeyedTester runs in a CI with no PySpark (docs/compatibility.md): the package imports
    with every ``pyspark`` module refused. (The smoke tier checks it in a venv without PySpark;
    this catches a module-level PySpark import in the main suite, where PySpark is installed.)"""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import importlib.abc, sys
        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "pyspark" or name.startswith("pyspark."):
                    raise ImportError("no pyspark here: " + name)
        sys.meta_path.insert(0, Refuse())
        from spark_keyed_sql import KeyedTester, StatefulFunction
        class Count(StatefulFunction):
            def __init__(self, **kw):
                super().__init__(**kw)
                self.n = 0
            def execute(self, e):
                self.n += 1
                return {"n": self.n}
        t = KeyedTester(Count, returns="n bigint")
        print([r["n"] for r in t.run([{}, {}], key="k")])
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[1, 2]"
