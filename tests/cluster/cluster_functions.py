from spark_keyed_sql import StatefulFunction


class Running(StatefulFunction):
    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total = round(self.total + e["value"], 6)
        return (self.n, self.total)
