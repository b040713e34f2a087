from spark_keyed_sql import StatefulFunction


class RunningTotal(StatefulFunction):
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
