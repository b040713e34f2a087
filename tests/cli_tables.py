"""The CLI's printed tables (``+---+`` boxes of ``| a | b |`` rows) read back by the tests."""

__all__ = ["printed_rows"]


def printed_rows(out: str) -> list[list[str]]:
    """Each printed row's cells, stripped, without the header row."""
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| ")]
    return rows[1:]
