"""The options of every JVM the tests start: the shared session (conftest.py), the crash and
kill tests' child processes, and the notebooks' kernels (test_notebooks.py, through the java
launcher's ``JDK_JAVA_OPTIONS``).

The JIT's first tier only: a test's work is small and short-lived, and the optimising
compiler's threads took CPU the two workers on 2 cores need (two test files together,
2026-12-01: 314 s -> 269 s). Benchmarks and users' sessions keep the JVM's default."""

__all__ = ["TEST_JAVA_OPTIONS"]

TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
