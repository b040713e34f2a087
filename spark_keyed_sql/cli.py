"""The ``spark-keyed-sql`` command: run and explain keyed SQL files, show and migrate state.

A SQL file may hold several statements separated by ``;`` (views first, the keyed query
last) and may name the classes it needs in comments::

    -- udf: session_counter = my_module:UserSessionFunction

(``--udf`` on the command line does the same). A class gives its output schema as a
``returns`` class attribute, or the comment adds it: ``-- udf: name = mod:Class returns n bigint``.
``${here}`` in the file stands for the file's own directory (data paths beside the query).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from typing import Any

__all__ = ["main", "split_statements", "udf_specs", "read_sql_file", "register_udfs"]

_UDF_COMMENT = re.compile(r"^\s*--\s*udf:\s*(?P<spec>.+?)\s*$", re.M)
_UDF = re.compile(r"^(?P<name>\w+)\s*=\s*(?P<target>[\w.]+:\w+)(?:\s+returns\s+(?P<returns>.+))?$")


def split_statements(text: str) -> list[str]:
    """Statements of a SQL file, cut at top-level ``;`` (sqlglot's tokenizer, so a ``;`` inside a
    string or comment does not cut)."""
    from sqlglot.tokens import TokenType

    from .sql.dialect import KeyedSpark

    out, start = [], 0
    for tok in KeyedSpark().tokenize(text):
        if tok.token_type == TokenType.SEMICOLON:
            out.append(text[start : tok.start])
            start = tok.end + 1
    out.append(text[start:])
    return [s.strip() for s in out if _strip_comments(s).strip()]


def _strip_comments(s: str) -> str:
    return "\n".join(line for line in s.splitlines() if not line.strip().startswith("--"))


def udf_specs(text: str, extra: list[str]) -> list[tuple[str, str, str | None]]:
    specs = []
    for raw in [m.group("spec") for m in _UDF_COMMENT.finditer(text)] + list(extra):
        m = _UDF.match(raw.strip())
        if not m:
            raise SystemExit(f"error: --udf / '-- udf:' expects NAME=module:Class [returns <ddl>], got {raw!r}")
        specs.append((m.group("name"), m.group("target"), m.group("returns")))
    return specs


def register_udfs(ks: Any, specs: list[tuple[str, str, str | None]], base_dir: str | None) -> None:
    if base_dir and base_dir not in sys.path:
        sys.path.insert(0, base_dir)  # classes beside the SQL file
    for name, target, returns in specs:
        module, cls_name = target.split(":")
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError) as exc:
            raise SystemExit(f"error: cannot load {target} for function '{name}': {exc}") from None
        ks.register(name, cls, returns=returns)


def _session(master: str | None):
    from pyspark.sql import SparkSession

    from .local import local_session
    from .session import configure_session

    if master and master.startswith("sc://"):
        spark = SparkSession.builder.remote(master).getOrCreate()  # Spark Connect
        configure_session(spark)
        return spark
    if master is None and _under_spark_submit():
        spark = SparkSession.builder.appName("spark-keyed-sql").getOrCreate()  # spark-submit's master and conf
    elif master is None or master.startswith("local"):
        return local_session("spark-keyed-sql", master=master or "local[2]")
    else:
        spark = SparkSession.builder.appName("spark-keyed-sql").master(master).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    configure_session(spark)
    return spark


def _under_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands Python its gateway (the launcher script)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _print_table(df: Any, limit: int) -> None:
    rows = df.limit(limit + 1).collect()
    cols = df.columns
    cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows[:limit]]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    print(line)
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |")
    print(line)
    for r in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |")
    print(line)
    more = " (more not shown; --limit)" if len(rows) > limit else ""
    print(f"{len(cells)} row(s){more}")


def _progress(p: dict) -> None:
    print(
        f"  batch {p.get('batch_id')}: {p.get('input_rows', 0)} rows in, {p.get('output_rows') or 0} out, "
        f"{p.get('keys_touched', 0)} keys touched, {p.get('state_rows', '?')} keys in state",
        file=sys.stderr,
        flush=True,
    )


def read_sql_file(path: str) -> str:
    here = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        return f.read().replace("${here}", here)


def _load(args: argparse.Namespace) -> tuple[Any, Any, list[str]]:
    from . import KeyedSQL

    text = read_sql_file(args.file)
    spark = _session(args.master)
    ks = KeyedSQL(spark, engine=args.engine)
    register_udfs(ks, udf_specs(text, args.udf), os.path.dirname(os.path.abspath(args.file)))
    return spark, ks, split_statements(text)


def cmd_run(args: argparse.Namespace) -> int:
    spark, ks, statements = _load(args)
    if not statements:
        raise SystemExit(f"error: {args.file} holds no SQL statement")
    for s in statements[:-1]:
        ks.sql(s)  # views, settings: run as they are
    last = statements[-1]
    if args.checkpoint or args.output:
        if not args.output:
            raise SystemExit("error: --checkpoint needs --output (a directory or table name)")
        summary = ks.run(last, checkpoint=args.checkpoint, output=args.output, progress=_progress)
        print(
            f"done: {summary['batches']} batch(es), {summary['input_rows']} rows in, {summary['output_rows']} rows out, "
            f"{summary['keys_touched']} keys touched, {summary['late_rows']} late rows dropped"
        )
    else:
        _print_table(ks.sql(last), args.limit)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    spark, ks, statements = _load(args)
    for s in statements[:-1]:
        ks.sql(s)
    print(ks.explain(statements[-1]))
    return 0


def cmd_state_show(args: argparse.Namespace) -> int:
    from . import KeyedSQL

    ks = KeyedSQL(_session(args.master))
    if args.changes:
        df = ks.read_state_changes(args.checkpoint, args.function)
    else:
        df = ks.read_state(args.checkpoint, args.function, args.batch)
    _print_table(df, args.limit)
    return 0


def cmd_state_migrate(args: argparse.Namespace) -> int:
    from . import KeyedSQL

    ks = KeyedSQL(_session(args.master))
    register_udfs(ks, udf_specs("", args.udf), os.getcwd())
    info = ks.migrate_state(
        args.src, args.dst, function=args.function, to_function=args.to_function, transform=args.transform, partitions=args.partitions
    )
    print(f"migrated {info['keys']} keys at batch {info['batch_id']} into {args.dst} ({info['partitions']} partitions)")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spark-keyed-sql")
    except PackageNotFoundError:  # a source tree that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spark-keyed-sql", description="Keyed, stateful Python functions in Spark SQL.")
    p.add_argument("--master", default=None, help="Spark master (default local[2]; e.g. spark://host:7077, or sc://host:15002 for Spark Connect)")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("file", help="a .sql file: statements separated by ';', the keyed query last")
        sp.add_argument("--udf", action="append", default=[], metavar="NAME=module:Class",
                        help="register a class as NAME (repeatable; '-- udf:' comments in the file do the same)")
        sp.add_argument("--engine", default="auto", choices=["auto", "bulk", "tws"], help="execution engine (default auto)")

    run = sub.add_parser("run", help="run a SQL file; with --checkpoint/--output as an incremental batch (ks.run)")
    common(run)
    run.add_argument("--checkpoint", help="checkpoint directory: state carried between runs")
    run.add_argument("--output", help="output directory or table (with --checkpoint)")
    run.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    run.set_defaults(fn=cmd_run)

    ex = sub.add_parser("explain", help="show the plan the rewriter makes for the file's last statement")
    common(ex)
    ex.set_defaults(fn=cmd_explain)

    state = sub.add_parser("state", help="keyed state of a checkpoint")
    ssub = state.add_subparsers(dest="state_command", required=True)
    show = ssub.add_parser("show", help="one row per key (ks.read_state), or the change feed")
    show.add_argument("checkpoint")
    show.add_argument("--function", help="the function, when the checkpoint holds several")
    show.add_argument("--batch", type=int, help="an older committed batch")
    show.add_argument("--changes", action="store_true", help="the change feed (ks.read_state_changes)")
    show.add_argument("--limit", type=int, default=50)
    show.set_defaults(fn=cmd_state_show)
    mig = ssub.add_parser("migrate", help="rewrite state into a new checkpoint (ks.migrate_state)")
    mig.add_argument("src")
    mig.add_argument("dst")
    mig.add_argument("--udf", action="append", default=[], metavar="NAME=module:Class", help="the target function's class")
    mig.add_argument("--function", help="the source function, when the checkpoint holds several")
    mig.add_argument("--to-function", help="the target function's registered name (a rename)")
    mig.add_argument("--transform", help="SQL over a view named 'state' that evolves the schema")
    mig.add_argument("--partitions", type=int, help="hash partitions of the new checkpoint")
    mig.set_defaults(fn=cmd_state_migrate)
    return p


def main(argv: list[str] | None = None) -> int:
    from .api.errors import KeyedSQLError

    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except KeyedSQLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
