"""The CLI's JVM standard error: everything passes but the tws driver worker's print lines and
the JVM's incubator-module notice."""

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
        from spark_keyed_sql.jvm_stderr import drain, filtered_jvm_stderr
        with filtered_jvm_stderr():
            child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])  # inherits the pipe, as the JVM does
        os.write(2, b"mine after\\n")  # the process's own standard error is its own again
        child.wait()
        assert drain(30), "the pump did not finish after the child exited"
        """
    )
    jvm = textwrap.dedent(
        f"""
        import sys
        sys.stderr.write("WARNING: Using incubator modules: jdk.incubator.vector\\n")
        sys.stderr.write("WARN one\\n")
        print("Starting {CHATTER}.\\n", file=sys.stderr)
        sys.stderr.write("\\n\\nERROR two\\n")
        print("{CHATTER} Starting execution of UDF: f.\\n", file=sys.stderr)
        sys.stderr.write("tail without newline")
        """
    )
    run = subprocess.run([sys.executable, "-c", code, jvm], capture_output=True, timeout=60, env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    # oracle: what the child wrote, without the JVM's notice and what the worker's two prints
    # wrote (a line, a blank one)
    written = (
        "WARNING: Using incubator modules: jdk.incubator.vector\n"
        f"WARN one\nStarting {CHATTER}.\n\n\n\nERROR two\n"
        f"{CHATTER} Starting execution of UDF: f.\n\ntail without newline"
    )
    expected = written.replace("WARNING: Using incubator modules: jdk.incubator.vector\n", "")
    expected = expected.replace(f"Starting {CHATTER}.\n\n", "").replace(
        f"{CHATTER} Starting execution of UDF: f.\n\n", ""
    )
    assert run.stderr.decode().replace("mine after\n", "") == expected
    assert b"mine after\n" in run.stderr


def test_a_console_that_cannot_be_written_is_drained_not_blocked_on():
    """The JVM must never block on a full pipe: once the console fails (here /dev/full), the
    pump reads on and discards, to the writer's end."""
    import threading

    from spark_keyed_sql.jvm_stderr import _pump

    read_fd, write_fd = os.pipe()
    console = os.open("/dev/full", os.O_WRONLY)  # every write fails (ENOSPC)
    written = []

    def jvm():  # far more than a pipe holds (64 KiB)
        with os.fdopen(write_fd, "wb") as w:
            for i in range(20_000):
                w.write(b"ERROR line %d of the JVM's standard error\n" % i)
        written.append(True)

    writer = threading.Thread(target=jvm)
    writer.start()
    _pump(read_fd, console)  # returns at the writer's end of file, raising nothing
    writer.join(timeout=30)
    assert written == [True]
