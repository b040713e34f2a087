"""The ``spark-keyed-sql`` command: run and explain keyed SQL files, show, migrate and edit state.

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
import logging
import os
import re
import sys
import warnings
from typing import Any

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "UsageError",
    "main",
    "split_statements",
    "statement_spans",
    "udf_specs",
    "read_sql_file",
    "register_udfs",
]

_UDF_COMMENT = re.compile(r"^\s*--\s*udf:\s*(?P<spec>.+?)\s*$", re.M)
_UDF = re.compile(r"^(?P<name>\w+)\s*=\s*(?P<target>[\w.]+:\w+)(?:\s+returns\s+(?P<returns>.+))?$")


def split_statements(text: str) -> list[str]:
    """Statements of a SQL file, cut at top-level ``;`` (sqlglot's tokenizer, so a ``;`` inside a
    string or comment does not cut)."""
    return [s for s, _, _ in statement_spans(text)]


def statement_spans(text: str) -> list[tuple[str, int, int]]:
    """``split_statements`` with where each statement starts in the file: (statement, line,
    column), both 1-based, so an error inside a statement can name the file's line; the
    statement without the comment lines before it (``-- udf:`` lines are read from the whole
    file), so its line 1 is that line."""
    from sqlglot.tokens import TokenType

    from .sql.dialect import KeyedSpark

    pieces, start = [], 0
    try:
        tokens = KeyedSpark().tokenize(text)
    except Exception as exc:  # noqa: BLE001 - sqlglot's TokenError: an unterminated string or comment
        raise _FileError(f"cannot split the file into statements: {exc}") from None
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            pieces.append((start, text[start : tok.start]))
            start = tok.end + 1
    pieces.append((start, text[start:]))
    out = []
    for offset, piece in pieces:
        if not _strip_comments(piece).strip():
            continue
        begin = offset + (len(piece) - len(piece.lstrip()))
        while text.startswith("--", begin):  # leading comment lines: the statement starts below them
            nl = text.find("\n", begin)
            begin = nl + 1 + (len(text[nl + 1 :]) - len(text[nl + 1 :].lstrip()))
        line = text.count("\n", 0, begin) + 1
        col = begin - (text.rfind("\n", 0, begin) + 1) + 1
        out.append((text[begin : offset + len(piece)].strip(), line, col))  # (its line 1 is the file's `line`)
    return out


class _FileError(Exception):
    """A failure of the CLI's own, reported as one ``error:`` line."""


def _strip_comments(s: str) -> str:
    return "\n".join(line for line in s.splitlines() if not line.strip().startswith("--"))


def udf_specs(text: str, extra: list[str]) -> list[tuple[str, str, str | None]]:
    specs = []
    for raw in [m.group("spec") for m in _UDF_COMMENT.finditer(text)] + list(extra):
        m = _UDF.match(raw.strip())
        if not m:
            raise UsageError(f"--udf / '-- udf:' expects NAME=module:Class [returns <ddl>], got {raw!r}")
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
            raise UsageError(f"cannot load {target} for function '{name}': {exc}") from None
        ks.register(name, cls, returns=returns)


_DEBUG = False  # --debug: Spark's own log lines, this package's log at DEBUG, the full trace of a failure

# exit status: 0 done; 2 any failure (one `error:` line); 130 interrupted (docs/cli.md)
EXIT_OK, EXIT_ERROR, EXIT_INTERRUPTED = 0, 2, 130


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (not the one at creation)."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _log_to_stderr() -> logging.Handler:
    """--debug: this package's log (every module's ``spark_keyed_sql.*`` logger) at DEBUG on stderr."""
    root = logging.getLogger("spark_keyed_sql")
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    return handler


def _stop_logging(handler: logging.Handler) -> None:
    root = logging.getLogger("spark_keyed_sql")
    root.removeHandler(handler)
    root.setLevel(logging.NOTSET)


class UsageError(Exception):
    """A command given what it cannot use (a missing option, a bad --udf): one `error:` line."""


def _session(master: str | None):
    from pyspark.sql import SparkSession

    from .engines.settings import configure_session
    from .jvm_stderr import filtered_jvm_stderr
    from .local import local_session

    if master and master.startswith("sc://"):
        spark = SparkSession.builder.remote(master).getOrCreate()  # Spark Connect
        configure_session(spark)
        return spark
    if master is None and _under_spark_submit():
        spark = SparkSession.builder.appName("spark-keyed-sql").getOrCreate()  # spark-submit's master and conf
    elif master is None or master.startswith("local"):  # (quiet: tws's worker lines left out as the JVM starts)
        level = "WARN" if _DEBUG else "ERROR"
        return local_session("spark-keyed-sql", master=master or "local[2]", log_level=level, quiet=not _DEBUG)
    else:
        with filtered_jvm_stderr(enabled=not _DEBUG):
            spark = (
                SparkSession.builder.appName("spark-keyed-sql")
                .master(master)
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
    spark.sparkContext.setLogLevel("WARN" if _DEBUG else "ERROR")
    configure_session(spark)
    return spark


def _under_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands Python its gateway (the launcher script)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _cell(v: Any) -> str:
    """A value as the table shows it: NULL, a struct as ``{name: value, ...}``."""
    from pyspark.sql import Row

    if v is None:
        return "NULL"
    if isinstance(v, Row):
        return "{" + ", ".join(f"{k}: {_cell(x)}" for k, x in v.asDict().items()) + "}"
    return str(v)


def _print_table(df: Any, limit: int) -> None:
    rows = df.limit(limit + 1).collect()
    cols = df.columns
    cells = [[_cell(v) for v in r] for r in rows[:limit]]
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


def _count(n: int | None) -> str:
    """A count the run may not know (keys touched on engine tws through Spark Connect, a batch's
    output rows on engine tws when Spark's sink does not report them)."""
    return "?" if n is None else str(n)


def _progress(p: dict) -> None:
    # a natively planned step (docs/native.md): the path the batch took
    path = f", {'native' if p.get('native') else 'on the Python path'}" if p.get("native_choice") else ""
    print(
        f"  batch {p.get('batch_id')}: {p.get('input_rows', 0)} rows in, {_count(p.get('output_rows'))} out, "
        f"{_count(p.get('keys_touched'))} keys touched, {p.get('state_rows', '?')} keys in state{path}",
        file=sys.stderr,
        flush=True,
    )


def read_sql_file(path: str) -> str:
    here = os.path.dirname(os.path.abspath(path))
    try:
        with open(path) as f:
            return f.read().replace("${here}", here)
    except OSError as exc:
        raise _FileError(f"cannot read {path}: {exc.strerror or exc}") from None


class _Statement:
    """Runs one statement of the file; a failure inside it names the file's line."""

    def __init__(self, file: str, line: int, col: int):
        self.file, self.line, self.col = file, line, col

    def __enter__(self) -> _Statement:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or not isinstance(exc, Exception) or _DEBUG:
            return False
        from .sql.errors import KeyedSQLSyntaxError

        if isinstance(exc, KeyedSQLSyntaxError) and exc.line is not None:
            line = self.line + exc.line - 1
            col = (exc.col or 1) + (self.col - 1 if exc.line == 1 else 0)
            raise _FileError(f"{self.file}, line {line}, column {col}: {exc.description}") from exc
        m = _SPARK_POS.search(str(exc))
        if m:  # Spark's own parser: (line N, pos P) within the statement, P 0-based
            line = self.line + int(m["line"]) - 1
            col = int(m["pos"]) + 1 + (self.col - 1 if m["line"] == "1" else 0)
            message = _SPARK_POS.sub("", _first_line(exc)).rstrip()
            raise _FileError(f"{self.file}, line {line}, column {col}: {message}") from exc
        raise _FileError(f"{self.file}, statement at line {self.line}: {_describe(exc)}") from exc


_SPARK_POS = re.compile(r"\s*\(line (?P<line>\d+), pos (?P<pos>\d+)\)")


def _first_line(exc: BaseException) -> str:
    from .sql.errors import spark_hint

    return spark_hint(exc)


def _describe(exc: BaseException) -> str:
    """An error as the CLI prints it: ours in full (its message is the explanation: function,
    key, row and the user's frames), anything else (Spark's, Python's) as its first line."""
    from .api.errors import KeyedSQLError

    if isinstance(exc, KeyedSQLError):
        return str(exc)
    return (
        _first_line(exc)
        if not isinstance(exc, (OSError, LookupError, ValueError, TypeError))
        else f"{type(exc).__name__}: {_first_line(exc)}"
    )


def _load(args: argparse.Namespace) -> tuple[Any, Any, list[tuple[str, int, int]]]:
    from . import KeyedSQL

    text = read_sql_file(args.file)
    statements = statement_spans(text)
    spark = _session(args.master)
    ks = KeyedSQL(spark, engine=args.engine)
    register_udfs(ks, udf_specs(text, args.udf), os.path.dirname(os.path.abspath(args.file)))
    return spark, ks, statements


def _run_file(args: argparse.Namespace, last: Any) -> int:
    """Every statement of the file but the last run as it is (views, settings); the last one
    by ``last(ks, statement)``. A failure names the file's line."""
    spark, ks, statements = _load(args)
    if not statements:
        raise UsageError(f"{args.file} holds no SQL statement")
    for s, line, col in statements[:-1]:
        with _Statement(args.file, line, col):
            ks.sql(s)
    statement, line, col = statements[-1]
    with _Statement(args.file, line, col):
        last(ks, statement)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.checkpoint and not args.output:
        raise UsageError("--checkpoint needs --output (a directory or table name)")

    def run(ks: Any, statement: str) -> None:
        if args.output:
            summary = ks.run(statement, checkpoint=args.checkpoint, output=args.output, progress=_progress)
            print(
                f"done: {summary['batches']} batch(es), {summary['input_rows']} rows in, {summary['output_rows']} rows "
                f"out, {_count(summary['keys_touched'])} keys touched, {summary['late_rows']} late rows dropped"
            )
        else:
            _print_table(ks.sql(statement), args.limit)

    return _run_file(args, run)


def cmd_explain(args: argparse.Namespace) -> int:
    return _run_file(args, lambda ks, statement: print(ks.explain(statement)))


def cmd_state_show(args: argparse.Namespace) -> int:
    from . import KeyedSQL

    ks = KeyedSQL(_session(args.master))
    if args.from_batch is not None and not args.changes:
        raise UsageError("state show: --from-batch goes with --changes (the change feed after batch N)")
    if args.changes:
        df = ks.read_state_changes(args.checkpoint, args.function, args.from_batch, args.batch)  # (up to --batch)
    else:
        df = ks.read_state(args.checkpoint, args.function, args.batch)
    _print_table(_by_key(ks.spark, df, args.checkpoint, args.function, args.changes), args.limit)
    return 0


def _by_key(spark: Any, df: Any, checkpoint: str, function: str | None, changes: bool) -> Any:
    """The rows in key order (the change feed: by batch, then key and variable), so that a
    --limit shows the same keys each time; a checkpoint without this project's record of its
    keys (a plain Spark one) as read (the change feed by batch)."""
    from .compat.names import named
    from .state.checkpoint import read_metadata

    meta = read_metadata(checkpoint, spark)
    ops = meta.operators if meta is not None else []
    op = meta.operator(function) if function and meta is not None else (ops[0] if len(ops) == 1 else None)
    key_names = {k.lower() for k in op.keys} if op is not None else set()
    order = [c for c in df.columns if c.lower() in key_names]  # (quoted: a key may be named `a.b`)
    if changes:
        order = ["batch_id", *order, *[c for c in ("variable", "change") if c in df.columns]]
    return df.orderBy(*map(named, order)) if order else df


def cmd_state_migrate(args: argparse.Namespace) -> int:
    from . import KeyedSQL

    ks = KeyedSQL(_session(args.master))
    register_udfs(ks, udf_specs("", args.udf), os.getcwd())
    info = ks.migrate_state(
        args.src,
        args.dst,
        function=args.function,
        to_function=args.to_function,
        transform=args.transform,
        partitions=args.partitions,
        dry_run=args.dry_run,
        sample=args.sample,
    )
    if args.dry_run:  # the state of a sample of keys before and after; nothing written
        _print_table(info, args.sample)
        print(f"dry run: nothing written to {args.dst}")
        return 0
    print(f"migrated {info['keys']} keys at batch {info['batch_id']} into {args.dst} ({info['partitions']} partitions)")
    return 0


NO_MATCH_WARNING = r".* matched no key of "  # the edit's warning when its WHERE matched nothing (state_edits.py)


def _print_audit(audit: dict) -> None:
    verb = "erased" if audit["operation"] == "delete" else "updated"
    if not audit["keys_matched"]:
        print(f"no key matched: nothing {verb}, nothing written ({audit['seconds']} s)")
        return
    batches = ", ".join(map(str, audit["output_batches"])) or "none known"
    print(
        f"{verb} {audit['keys_matched']} key(s) ({audit['state_rows']} state rows) at batch {audit['batch_id']}: "
        f"{audit['versions_rewritten']} version(s) rewritten, {audit['files_removed']} file(s) removed, "
        f"{audit['seconds']} s; batches whose output may hold them: {batches}"
    )


def cmd_state_delete(args: argparse.Namespace) -> int:
    from . import KeyedSQL

    ks = KeyedSQL(_session(args.master))
    register_udfs(ks, udf_specs("", args.udf), os.getcwd())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", NO_MATCH_WARNING, UserWarning)  # (_print_audit says it)
        audit = ks.delete_state(args.checkpoint, where=args.where, function=args.function, timeout=args.timeout)
    _print_audit(audit)
    return 0


def cmd_state_update(args: argparse.Namespace) -> int:
    from . import KeyedSQL

    assignments = {}
    for item in args.set:
        column, eq, expr = item.partition("=")
        if not eq or not column.strip() or not expr.strip():
            raise UsageError(f"--set takes COLUMN=EXPR (a SQL expression), got {item!r}")
        assignments[column.strip()] = expr.strip()
    ks = KeyedSQL(_session(args.master))
    register_udfs(ks, udf_specs("", args.udf), os.getcwd())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", NO_MATCH_WARNING, UserWarning)  # (_print_audit says it)
        audit = ks.update_state(
            args.checkpoint, set=assignments, where=args.where, function=args.function, timeout=args.timeout
        )
    _print_audit(audit)
    return 0


def cmd_state_unlock(args: argparse.Namespace) -> int:
    import datetime

    from . import KeyedSQL

    ks = KeyedSQL(_session(args.master))
    holder = ks.unlock(args.checkpoint)
    if holder is None:
        print(f"{args.checkpoint} was not locked")
    elif not holder:
        print(f"removed an unreadable lock from {args.checkpoint}")
    else:
        beat = holder.get("heartbeat_ms")
        when = (
            datetime.datetime.fromtimestamp(beat / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            if beat
            else "?"
        )
        print(
            f"removed the lock of process {holder.get('pid')} on {holder.get('host')} (last heartbeat {when}) from "
            f"{args.checkpoint}"
        )
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spark-keyed-sql")
    except PackageNotFoundError:  # a source tree that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    from .engines import AUTO, engine_names

    p = argparse.ArgumentParser(prog="spark-keyed-sql", description="Keyed, stateful Python functions in Spark SQL.")
    p.add_argument(
        "--master",
        default=None,
        help="Spark master (default local[2]; e.g. spark://host:7077, or sc://host:15002 for Spark Connect)",
    )
    p.add_argument(
        "--debug",
        action="store_true",
        help="on failure, the full trace; Spark's own log lines and this package's log (DEBUG)",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    # --master and --debug after the command too (spark-keyed-sql run q.sql --debug); SUPPRESS: a
    # command's parser sets them only when given there, else the top-level value stands
    anywhere = argparse.ArgumentParser(add_help=False)
    anywhere.add_argument("--master", default=argparse.SUPPRESS, help="as before the command")
    anywhere.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="as before the command")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("file", help="a .sql file: statements separated by ';', the keyed query last")
        sp.add_argument(
            "--udf",
            action="append",
            default=[],
            metavar="NAME=module:Class",
            help="register a class as NAME (repeatable; '-- udf:' comments in the file do the same)",
        )
        sp.add_argument(
            "--engine", default=AUTO, choices=[AUTO, *engine_names()], help="execution engine (default auto)"
        )

    run = sub.add_parser(
        "run", parents=[anywhere], help="run a SQL file; with --checkpoint/--output as an incremental batch (ks.run)"
    )
    common(run)
    run.add_argument("--checkpoint", help="checkpoint directory: state carried between runs")
    run.add_argument("--output", help="output directory or table (with --checkpoint)")
    run.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    run.set_defaults(fn=cmd_run)

    ex = sub.add_parser(
        "explain", parents=[anywhere], help="show the plan the rewriter makes for the file's last statement"
    )
    common(ex)
    ex.set_defaults(fn=cmd_explain)

    state = sub.add_parser("state", help="keyed state of a checkpoint")
    ssub = state.add_subparsers(dest="state_command", required=True)
    show = ssub.add_parser("show", parents=[anywhere], help="one row per key (ks.read_state), or the change feed")
    show.add_argument("checkpoint")
    show.add_argument("--function", help="the function, when the checkpoint holds several")
    show.add_argument("--batch", type=int, help="an older committed batch (with --changes: the feed up to it)")
    show.add_argument("--changes", action="store_true", help="the change feed (ks.read_state_changes)")
    show.add_argument(
        "--from-batch", type=int, metavar="N", help="with --changes: the feed after batch N (e.g. after a DELETE)"
    )
    show.add_argument("--limit", type=int, default=50)
    show.set_defaults(fn=cmd_state_show)
    mig = ssub.add_parser("migrate", parents=[anywhere], help="rewrite state into a new checkpoint (ks.migrate_state)")
    mig.add_argument("src")
    mig.add_argument("dst")
    mig.add_argument(
        "--udf", action="append", default=[], metavar="NAME=module:Class", help="the target function's class"
    )
    mig.add_argument("--function", help="the source function, when the checkpoint holds several")
    mig.add_argument("--to-function", help="the target function's registered name (a rename)")
    mig.add_argument("--transform", help="SQL that reads the state as 'state' and evolves the schema")
    mig.add_argument("--partitions", type=int, help="hash partitions of the new checkpoint")
    mig.add_argument(
        "--dry-run", action="store_true", help="write nothing: print a sample of keys' state before and after"
    )
    mig.add_argument("--sample", type=int, default=20, help="keys shown by --dry-run, the smallest (default 20)")
    mig.set_defaults(fn=cmd_state_migrate)
    dele = ssub.add_parser(
        "delete",
        parents=[anywhere],
        help="erase the keys matching --where from every file of a checkpoint (a running query applies it)",
    )
    upd = ssub.add_parser(
        "update", parents=[anywhere], help="set state columns of the keys matching --where (as delete)"
    )
    for edit in (dele, upd):
        edit.add_argument("checkpoint")
        edit.add_argument("--where", required=True, help="SQL predicate over the key and state columns")
        edit.add_argument("--function", help="the function, when the checkpoint holds several")
        edit.add_argument(
            "--udf", action="append", default=[], metavar="NAME=module:Class", help="the function's class"
        )
        edit.add_argument(
            "--timeout",
            type=float,
            metavar="SECONDS",
            help="how long to wait for a running query to apply it (default: spark.keyedsql.editTimeout, 10 minutes)",
        )
    upd.add_argument(
        "--set", action="append", required=True, metavar="COLUMN=EXPR", help="a state column and its SQL expression"
    )
    dele.set_defaults(fn=cmd_state_delete)
    upd.set_defaults(fn=cmd_state_update)
    unl = ssub.add_parser(
        "unlock", parents=[anywhere], help="remove a checkpoint's lock left by a process that is gone (ks.unlock)"
    )
    unl.add_argument("checkpoint")
    unl.set_defaults(fn=cmd_state_unlock)
    return p


_REGISTER_HINT = "name its class with --udf name=module:Class (or in the SQL file: -- udf: name = module:Class)"


def main(argv: list[str] | None = None) -> int:
    """Every failure is one ``error:`` line on stderr (our errors add the user's frames below
    it), exit status 2; ``--debug`` raises it with its full trace instead."""
    global _DEBUG
    args = build_parser().parse_args(argv)
    _DEBUG = args.debug
    handler = _log_to_stderr() if _DEBUG else None
    if not _DEBUG:
        from .compat.query_context import silence_query_context_logs

        silence_query_context_logs()
    with warnings.catch_warnings():
        if not _DEBUG:
            # PySpark >= 4.2 with pandas 3 (supported, tested) warns on every pandas UDF it makes;
            # the CLI's stderr is for errors (--debug shows it)
            warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
        try:
            return args.fn(args)
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception as exc:  # noqa: BLE001 - the CLI's contract: one line, not a traceback
            if _DEBUG:
                raise
            text = str(exc) if isinstance(exc, (_FileError, UsageError)) else _describe(exc)
            # the CLI registers what the SQL file's `-- udf:` lines and --udf name, not ks.register
            print(f"error: {in_cli_words(text)}", file=sys.stderr)
            return EXIT_ERROR
        finally:
            if handler is not None:
                _stop_logging(handler)


# the Python API's argument names in messages -> the CLI's flags (ks.run(checkpoint=...), function=...)
_PYTHON_TO_FLAGS = [
    (re.compile(r"\bks\.run needs checkpoint=\.\.\."), "run needs --checkpoint DIR"),
    (re.compile(r"\bks\.run needs output="), "run needs --output "),
    (re.compile(r"\bin ks\.run\(checkpoint=\.\.\.\)"), "in --checkpoint"),
    (re.compile(r"\bpass function=\.\.\."), "pass --function NAME"),
    (re.compile(r"\(from_batch=(\d+)\)"), r"(--from-batch \1)"),
]


def in_cli_words(text: str) -> str:
    """A message written for the Python API in the CLI's words: its flags for the keyword
    arguments, its --udf / '-- udf:' for ks.register."""
    text = text.replace("call ks.register first", _REGISTER_HINT)
    for python, flag in _PYTHON_TO_FLAGS:
        text = python.sub(flag, text)
    return text


if __name__ == "__main__":
    sys.exit(main())
