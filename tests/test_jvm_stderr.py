"""The CLI's JVM standard error: everything passes but the tws driver worker's print lines."""

import os
import subprocess
import sys
import textwrap

from spark_keyed_sql.jvm_stderr import CHATTER


def test_only_the_workers_lines_and_their_blank_lines_are_left_out():
    # a child process whose standard error is set up as the CLI sets up its JVM's
    code = textwrap.dedent(
        """
        import os, subprocess, sys
        from spark_keyed_sql.jvm_stderr import filtered_jvm_stderr
        with filtered_jvm_stderr():
            child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])  # inherits the pipe, as the JVM does
        os.write(2, b"mine after\\n")  # the process's own standard error is its own again
        child.wait()
        """
    )
    jvm = textwrap.dedent(
        f"""
        import sys
        sys.stderr.write("WARN one\\n")
        print("Starting {CHATTER}.\\n", file=sys.stderr)
        sys.stderr.write("\\n\\nERROR two\\n")
        print("{CHATTER} Starting execution of UDF: f.\\n", file=sys.stderr)
        sys.stderr.write("tail without newline")
        """
    )
    run = subprocess.run([sys.executable, "-c", code, jvm], capture_output=True, timeout=60, env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    # oracle: what the child wrote, without what the worker's two prints wrote (a line, a blank one)
    written = (
        f"WARN one\nStarting {CHATTER}.\n\n\n\nERROR two\n"
        f"{CHATTER} Starting execution of UDF: f.\n\ntail without newline"
    )
    expected = written.replace(f"Starting {CHATTER}.\n\n", "").replace(
        f"{CHATTER} Starting execution of UDF: f.\n\n", ""
    )
    assert run.stderr.decode().replace("mine after\n", "") == expected
    assert b"mine after\n" in run.stderr
