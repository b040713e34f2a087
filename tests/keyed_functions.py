"""Small StatefulFunction classes shared by the tests (and by the crash and cluster child
processes, which put this directory on their path)."""

from spark_keyed_sql import StatefulFunction


class Count(StatefulFunction):
    """Rows seen per key: returns (n,)."""

    n: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        return (self.n,)


class RunningTotal(StatefulFunction):
    """Rows and running sum of ``value`` per key: returns (n, total rounded to 6 places)."""

    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total += e["value"]
        return (self.n, round(self.total, 6))


class RunningTotalNative(StatefulFunction):
    """RunningTotal without its round(): a class the native planner runs as Spark SQL (on data
    of whole numbers its totals are RunningTotal's exactly; the planner takes direct
    StatefulFunction subclasses only, hence not a subclass of RunningTotal)."""

    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total += e["value"]
        return (self.n, self.total)
