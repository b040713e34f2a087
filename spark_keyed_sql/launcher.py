"""The CLI as a script file, for ``spark-submit`` (which runs a ``.py`` path, not ``-m``)::

    spark-submit --master spark://host:7077 "$(python -m spark_keyed_sql.launcher)" run FILE.sql ...

Run with ``python -m`` it prints its own path; run as a script it is ``spark-keyed-sql``.
Absolute imports only: spark-submit runs it outside its package."""

import os
import sys

__all__ = ["main"]


def main() -> int:
    from spark_keyed_sql.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    if __package__:  # python -m spark_keyed_sql.launcher: where spark-submit finds this file
        print(os.path.abspath(__file__))
        sys.exit(0)
    sys.exit(main())
