"""A sqlglot dialect: Spark SQL plus ``GROUP BY KEY ... WITH STATE ...`` and ``EXPLAIN KEYED``.

Extends sqlglot's Spark dialect only through its own hooks: the Parser's ``_parse_group``,
a ``QUERY_MODIFIER_PARSERS`` entry for the unkeyed ``WITH STATE`` form, ``STATEMENT_PARSERS``
for ``EXPLAIN``, and Generator ``TRANSFORMS`` for the new expression classes.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

from .expressions import ExplainKeyed, KeyedGroup, KeyedOption

__all__ = ["KeyedSpark"]

# tokens after GROUP BY KEY that make "key" a column (GROUP BY key, x / GROUP BY key.y / key + 1)
_KEY_AS_COLUMN_FOLLOWERS = {
    TokenType.COMMA,
    TokenType.DOT,
    TokenType.R_PAREN,
    TokenType.SEMICOLON,
    TokenType.HAVING,
    TokenType.ORDER_BY,
    TokenType.LIMIT,
    TokenType.PLUS,
    TokenType.DASH,
    TokenType.STAR,
    TokenType.SLASH,
    TokenType.EQ,
    TokenType.NEQ,
    TokenType.LT,
    TokenType.GT,
    TokenType.LTE,
    TokenType.GTE,
    TokenType.DPIPE,
    TokenType.UNION,
    TokenType.EXCEPT,
    TokenType.INTERSECT,
    TokenType.WINDOW,
    TokenType.CLUSTER_BY,
    TokenType.DISTRIBUTE_BY,
    TokenType.SORT_BY,
    TokenType.WITH,  # GROUP BY key WITH ROLLUP / WITH CUBE
    TokenType.GROUPING_SETS,
}


# a part of WITH STATE given twice, by its argument, in full
_PARTS_GIVEN_TWICE = {
    "event_time": "EVENT TIME ... WATERMARK",
    "ttl": "TTL",
    "initial_state": "INITIAL STATE FROM",
    "options": "OPTIONS (...)",
}

# GROUP BY <one of these> <more words> in a statement with WITH STATE: KEY misspelt
_KEY_TYPOS = {"KEYS", "KEYED", "KY", "KYE", "KEJ", "KEU"}

# the words that end a within-key ORDER BY: what follows it in WITH STATE's clause, and after
# (each word -> what must come next for it to be the clause, not a column; empty: anything)
_WITHIN_KEY_ORDER_ENDS: dict[str, frozenset] = {
    "EVENT": frozenset({"TIME"}),
    "TTL": frozenset({TokenType.STRING, TokenType.INTERVAL}),
    "INITIAL": frozenset({"STATE"}),
    "OPTIONS": frozenset({TokenType.L_PAREN}),
    "HAVING": frozenset(),
    "LIMIT": frozenset(),
}
# a WITH STATE clause's words that start a part of it, and the part in full: one left unfinished
# ("... ORDER" at the end) is named as such instead of failing as an unexpected token
_UNFINISHED_PARTS = {
    "ORDER": "ORDER BY <expr> [ASC|DESC], ... (the order of rows within a key)",
    "EVENT": "EVENT TIME <column> WATERMARK <interval>",
    "INITIAL": "INITIAL STATE FROM <table | (subquery)>",
    "OPTIONS": "OPTIONS (name = value, ...)",
}


# sqlglot 30.0.0 (the lowest pin) has no STREAM token: STREAM stays a name there, as before
_STREAM = getattr(TokenType, "STREAM", None)


def _literal_interval(e: exp.Expression) -> bool:
    """An interval of literal amounts (``INTERVAL 1 HOUR 30 MINUTES`` is sqlglot's sum of two)."""
    if isinstance(e, exp.Add):
        return _literal_interval(e.this) and _literal_interval(e.expression)
    return isinstance(e, exp.Interval) and isinstance(e.this, exp.Literal)


class KeyedSpark(Spark):
    class Tokenizer(Spark.Tokenizer):
        # EXPLAIN is a COMMAND keyword (rest of the text swallowed) in sqlglot; make it a plain word so
        # EXPLAIN KEYED <query> is parsed, and plain EXPLAIN falls back to a Command below.
        # STREAM: Spark 4.1+'s `FROM STREAM t` / `FROM STREAM(t)` (a table read as a stream), as
        # sqlglot's Databricks dialect has it (Spark's took `STREAM t` for a table STREAM aliased t)
        KEYWORDS = {k: v for k, v in Spark.Tokenizer.KEYWORDS.items() if k != "EXPLAIN"} | (
            {"STREAM": _STREAM} if _STREAM is not None else {}
        )

    class Parser(Spark.Parser):
        QUERY_MODIFIER_PARSERS = {
            **Spark.Parser.QUERY_MODIFIER_PARSERS,
            TokenType.WITH: lambda self: ("group", self._parse_unkeyed_with_state()),
        }
        STATEMENT_PARSERS = {
            **Spark.Parser.STATEMENT_PARSERS,
            TokenType.DESCRIBE: Spark.Parser.STATEMENT_PARSERS[TokenType.DESCRIBE],
        }

        FUNC_TOKENS = {*Spark.Parser.FUNC_TOKENS, *([_STREAM] if _STREAM is not None else [])}  # stream(...)

        def _parse_stream(self) -> exp.Stream | None:
            """``STREAM(t) [AS] a`` as ``STREAM t AS a``: one form to render, the one every Spark
            with the keyword reads (sqlglot takes the parenthesised name for a subquery).
            ``stream.t`` is a table of a database named stream."""
            if self._next is not None and self._next.token_type == TokenType.DOT:
                return None
            stream = super()._parse_stream()
            inner = stream.this if stream is not None else None
            if isinstance(inner, exp.Subquery) and isinstance(inner.this, exp.Table):
                table = inner.this
                if inner.args.get("alias") is not None:
                    table.set("alias", inner.args["alias"])
                stream.set("this", table)
            return stream

        # ---------------------------------------------------------- GROUP BY KEY
        def _is_group_by_key(self) -> bool:
            if not (self._curr and self._curr.text.upper() == "KEY" and self._curr.token_type != TokenType.STRING):
                return False
            nxt = self._next
            return bool(nxt) and nxt.token_type not in _KEY_AS_COLUMN_FOLLOWERS

        def _parse_group(self, skip_group_by_token: bool = False) -> exp.Expression | None:  # type: ignore[override]
            if (
                not skip_group_by_token
                and self._match(TokenType.GROUP_BY, advance=False)
                and self._no_keys_before_with_state()
            ):
                self.raise_error(
                    "Expected a key expression after GROUP BY KEY, e.g. GROUP BY KEY user_id WITH STATE fn(...)",
                    token=self._tokens[self._index + 2],
                )
            if not skip_group_by_token and self._match(TokenType.GROUP_BY, advance=False) and self._next_is_key():
                self._advance()  # GROUP BY
                self._advance()  # KEY
                keys = self._parse_csv(lambda: self._parse_aliasable("GROUP BY KEY", "a key expression"))
                if not self._match_text_seq("WITH", "STATE"):
                    found = f", found '{self._curr.text}'" if self._curr else ""
                    self.raise_error(
                        f"Expected WITH STATE <function>(...) after GROUP BY KEY <keys>{found} (the within-key "
                        "ORDER BY, TTL, OPTIONS, ... follow WITH STATE fn(...); a WHERE goes before GROUP BY KEY)"
                    )
                return self._parse_with_state_body(keys)
            start = self._curr
            group = super()._parse_group(skip_group_by_token)
            if group is not None and start and self._with_state_ahead():
                self._refuse_plain_group_by(group, start)
            return group

        def _with_state_ahead(self) -> bool:
            """WITH STATE among the tokens still to read (the keyed clause's words)."""
            rest = self._tokens[self._index :]
            return any(a.token_type == TokenType.WITH and b.text.upper() == "STATE" for a, b in zip(rest, rest[1:]))

        def _refuse_plain_group_by(self, group: exp.Expression, start) -> None:
            """A plain GROUP BY in a statement with WITH STATE: ``KEY`` left out or misspelt."""
            first = (group.expressions or [None])[0]
            word = first.name.upper() if isinstance(first, exp.Column) and not first.table else ""
            if word in _KEY_TYPOS and self._curr and self._curr.token_type == TokenType.VAR:
                self.raise_error(
                    f"GROUP BY {first.name} ...: did you mean GROUP BY KEY <keys> WITH STATE fn(...)?",
                    token=self._tokens[self._index - 1],
                )
            if self._curr and self._curr.token_type == TokenType.WITH:
                keys = ", ".join(e.sql(dialect="spark") for e in group.expressions)
                self.raise_error(
                    f"WITH STATE after a plain GROUP BY: the keys of a keyed query are written GROUP BY KEY {keys} "
                    "WITH STATE fn(...)",
                    token=start,
                )

        def _no_keys_before_with_state(self) -> bool:
            """GROUP BY KEY WITH STATE ...: the key list left out (not a column named key)."""
            t = self._tokens[self._index + 1 : self._index + 4]
            return (
                len(t) == 3
                and t[0].text.upper() == "KEY"
                and t[0].token_type != TokenType.STRING
                and t[1].token_type == TokenType.WITH
                and t[2].text.upper() == "STATE"
            )

        def _next_is_key(self) -> bool:
            index = self._index
            self._advance()
            try:
                return self._is_group_by_key()
            finally:
                self._retreat(index)

        def _parse_aliasable(self, clause: str, what: str) -> exp.Expression | None:
            """``expr [AS name]``: a key of GROUP BY KEY or an argument of WITH STATE fn(...)."""
            e = self._parse_disjunction()
            if e is None:
                self.raise_error(f"Expected {what} in {clause}")
            if self._match(TokenType.ALIAS):
                alias = self._parse_id_var(any_token=False)
                if alias is None:
                    self.raise_error(f"Expected a name after AS in {clause}")
                return self.expression(exp.Alias(this=e, alias=alias))
            return e

        def _parse_unkeyed_with_state(self) -> exp.Expression | None:
            if not (self._curr and self._next and self._next.text.upper() == "STATE"):
                return None
            self._advance(2)
            return self._parse_with_state_body([])

        # ---------------------------------------------------------- WITH STATE fn(...)
        def _parse_with_state_body(self, keys: list[exp.Expression]) -> exp.Expression:
            if not self._curr or self._curr.token_type in (
                TokenType.L_PAREN,
                TokenType.STRING,
                TokenType.NUMBER,
                TokenType.ALIAS,
                TokenType.ORDER_BY,
            ):
                self.raise_error("Expected a function call after WITH STATE, e.g. WITH STATE my_fn(col)")
            name_token = self._curr
            name = self._parse_id_var(any_token=True)
            if name is None or not self._match(TokenType.L_PAREN):
                self.raise_error(f"Expected '(' after WITH STATE {name_token.text}", token=self._curr or name_token)
            if self._match(TokenType.STAR):
                args: list[exp.Expression] = [exp.Star()]
                if self._curr and self._curr.token_type != TokenType.R_PAREN:
                    self.raise_error(
                        f"WITH STATE {name.name}(*) passes every source column; * cannot be named or combined "
                        "with other arguments"
                    )
            elif self._curr and self._curr.token_type == TokenType.R_PAREN:
                args = []
            else:
                args = self._parse_csv(lambda: self._parse_aliasable("WITH STATE arguments", "an argument"))
            if not self._match(TokenType.R_PAREN):
                self.raise_error("Expected ')' to close the WITH STATE function's arguments")
            function = self.expression(exp.Anonymous(this=name.name, expressions=args))
            alias = None
            if self._match(TokenType.ALIAS):
                alias = self._parse_id_var(any_token=False)
                if alias is None:
                    self.raise_error("Expected an alias after AS in WITH STATE")
            group = self.expression(KeyedGroup(keys=keys, keyed=bool(keys), function=function, alias=alias))
            self._parse_keyed_options(group)
            return group

        @staticmethod
        def _starts_clause(word, nxt) -> bool:
            """``word`` (then ``nxt``) starts what follows a within-key ORDER BY, not a column:
            EVENT TIME, TTL <interval>, INITIAL STATE, OPTIONS (, HAVING, ORDER BY, LIMIT."""
            if word.token_type == TokenType.ORDER_BY:
                return True
            follows = _WITHIN_KEY_ORDER_ENDS.get(word.text.upper())
            if follows is None:
                return False
            return not follows or (nxt is not None and (nxt.text.upper() in follows or nxt.token_type in follows))

        def _parse_within_key_order(self) -> exp.Expression | None:
            """One term of the within-key ORDER BY; after a comma a term must follow (sqlglot's
            list drops a trailing comma, which would end the order where the user meant more)."""
            after_comma = self._prev is not None and self._prev.token_type == TokenType.COMMA
            # (a clause word after the comma would be read as a term: OPTIONS (...) as a call)
            clause = self._curr is not None and self._starts_clause(self._curr, self._next)
            term = None if after_comma and clause else self._parse_ordered()
            if term is None and after_comma:
                self.raise_error("Expected an expression after ',' in the within-key ORDER BY", token=self._prev)
            return term

        def _parse_keyed_options(self, group: KeyedGroup) -> None:
            while self._curr:
                start = self._curr
                if group.args.get("order") is None and self._match(TokenType.ORDER_BY):
                    group.set("order", self._parse_csv(self._parse_within_key_order))
                    if not group.args["order"]:
                        self.raise_error(
                            f"Expected {_UNFINISHED_PARTS['ORDER']} after WITH STATE {group.function.name}(...)"
                        )
                elif self._match_text_seq("EVENT", "TIME"):
                    self._once(group, "event_time", start)
                    if not self._curr or (
                        self._curr.token_type == TokenType.VAR
                        and self._curr.text.upper() == "WATERMARK"
                        and not (self._next and self._next.text.upper() == "WATERMARK")
                    ):
                        self.raise_error(
                            "Expected the event-time column after EVENT TIME, e.g. EVENT TIME ts WATERMARK '10 minutes'"
                        )
                    group.set("event_time", self._parse_column())
                    if not self._match_text_seq("WATERMARK"):
                        self.raise_error("Expected WATERMARK <interval> after EVENT TIME <column>")
                    group.set("watermark", self._parse_interval_value())
                elif self._match_text_seq("TTL"):
                    self._once(group, "ttl", start)
                    group.set("ttl", self._parse_interval_value())
                elif self._match_text_seq("INITIAL", "STATE", "FROM"):
                    self._once(group, "initial_state", start)
                    group.set("initial_state", self._parse_initial_state_source())
                elif self._curr.text.upper() == "OPTIONS" and self._next and self._next.token_type == TokenType.L_PAREN:
                    self._once(group, "options", start)
                    self._advance(2)
                    group.set("options", self._parse_options_list())
                else:
                    word = self._curr.text.upper() if self._curr.token_type == TokenType.VAR else ""
                    if self._curr.text.upper() == "WITH" and self._next and self._next.text.upper() == "STATE":
                        self.raise_error("Only one WITH STATE per SELECT; nest the second in a subquery or CTE")
                    if word in _UNFINISHED_PARTS:
                        self.raise_error(
                            f"Expected {_UNFINISHED_PARTS[word]} after WITH STATE {group.function.name}(...)"
                        )
                    if self._curr.token_type == TokenType.WHERE:
                        self.raise_error(
                            f"WHERE after WITH STATE {group.function.name}(...): a WHERE filters the source rows and "
                            "goes before GROUP BY KEY (or WITH STATE); to filter the function's output use HAVING"
                        )
                    if word:  # a plain word cannot go on a SELECT after the clause
                        self.raise_error(
                            f"Unexpected '{self._curr.text}' after WITH STATE {group.function.name}(...): expected "
                            "ORDER BY, EVENT TIME ... WATERMARK, TTL, INITIAL STATE FROM, OPTIONS (...), HAVING "
                            "or the end of the SELECT (an alias is written AS name)"
                        )
                    return

        def _once(self, group: KeyedGroup, arg: str, token) -> None:
            if group.args.get(arg) is not None:
                part = _PARTS_GIVEN_TWICE.get(arg, token.text.upper())
                self.raise_error(f"{part} given twice in one WITH STATE clause", token=token)

        def _parse_options_list(self) -> list[exp.Expression]:
            """``name = literal, ...)`` after ``OPTIONS (``: each name once, up to the ``)``."""
            options: list[exp.Expression] = []
            seen: set[str] = set()
            while True:
                name_token = self._curr
                option = self._parse_keyed_option()
                name = option.name.lower()
                if name in seen:
                    self.raise_error(f"option {name} given twice in OPTIONS (...)", token=name_token)
                seen.add(name)
                options.append(option)
                if not self._match(TokenType.COMMA):
                    break
            if not self._match(TokenType.R_PAREN):
                if self._curr:
                    self.raise_error(
                        f"Expected ',' or ')' after option {options[-1].name} in OPTIONS (name = value, ...)"
                    )
                self.raise_error("Expected ')' to close OPTIONS (name = value, ...)")
            return options

        def _parse_interval_value(self) -> exp.Expression:
            if self._curr and self._curr.token_type == TokenType.STRING:
                return self._parse_primary()
            start = self._curr
            interval = self._parse_interval()
            if interval is None:
                self.raise_error("Expected an interval: INTERVAL 10 MINUTES or '10 minutes'")
            if not _literal_interval(interval):  # (`INTERVAL INTERVAL '10' MINUTES`, ...)
                self.raise_error("Expected an interval of a literal amount: INTERVAL 10 MINUTES or '10 minutes'", start)
            return interval

        def _parse_initial_state_source(self) -> exp.Expression:
            if self._curr and self._curr.token_type == TokenType.L_PAREN:
                self._advance()
                query = self._parse_select(nested=True)
                if query is None or not self._match(TokenType.R_PAREN):
                    self.raise_error("Expected (SELECT ...) after INITIAL STATE FROM")
                return self.expression(exp.Subquery(this=query))
            table = self._parse_table_parts() if self._curr else None
            if table is None:
                self.raise_error("Expected a table or (subquery) after INITIAL STATE FROM")
            return table

        def _parse_keyed_option(self) -> exp.Expression:
            name = self._parse_id_var(any_token=True)
            if name is None:
                self.raise_error("Expected an option name in OPTIONS (name = value, ...)")
            if not self._match(TokenType.EQ):
                self.raise_error(f"Expected '=' after option {name.name}")
            negative = self._match(TokenType.DASH)
            value = self._parse_primary()
            if negative and isinstance(value, exp.Literal) and not value.is_string:  # (-1: a number)
                value = exp.Literal(this=f"-{value.this}", is_string=False)
            elif negative:
                value = None
            if not isinstance(value, (exp.Literal, exp.Boolean)):
                self.raise_error(f"Option {name.name} needs a literal value (string, number, true/false)")
            return self.expression(KeyedOption(this=name, value=value))

        # ---------------------------------------------------------- table arguments
        # Spark's table-argument spellings, ``TABLE t`` and ``TABLE(t) PARTITION BY ... ORDER BY
        # ...`` / ``WITH SINGLE PARTITION``, read as the ``TABLE(t)`` call with the partitioning
        # kept on it (``partition_by``, ``order``, ``single_partition``): the table-function form
        # takes them as its key and order (sql/table_calls.py)
        LAMBDAS = {
            **Spark.Parser.LAMBDAS,
            TokenType.FARROW: lambda self, expressions: self.expression(
                exp.Kwarg(
                    this=exp.var(expressions[0].name),
                    expression=self._parse_table_argument() or self._parse_disjunction() or self._parse_select(),
                )
            ),
        }

        def _parse_lambda(self, alias: bool = False) -> exp.Expression | None:
            return self._parse_table_argument() or super()._parse_lambda(alias=alias)

        def _parse_table_argument(self) -> exp.Expression | None:
            """``TABLE t`` or ``TABLE(...)`` and what partitions it; None, nothing consumed,
            for any other argument."""
            if self._curr is None or self._curr.token_type != TokenType.TABLE or self._next is None:
                return None
            start = self._index
            if self._next.token_type == TokenType.L_PAREN:
                node = self._parse_disjunction()  # TABLE(...): sqlglot's function call
            elif self._next.token_type == TokenType.DOT:  # table.name: a column's field
                return None
            else:
                # TABLE <name> only where a table argument ends: else ``table`` is a column
                # (count_if(table = 'orders'), upper(table.name)) and is parsed as one
                self._advance()
                name = self._parse_table_parts() if self._curr is not None else None
                if name is None or not self._at_table_argument_end():
                    self._retreat(start)
                    return None
                node = self.expression(exp.Anonymous(this="TABLE", expressions=[name]))
            if isinstance(node, exp.Anonymous) and node.name.upper() == "TABLE":
                # (Spark's grammar: several partition or sort expressions go in parentheses)
                if self._match(TokenType.PARTITION_BY):
                    node.set("partition_by", self._parse_one_or_wrapped(self._parse_assignment))
                elif self._match_text_seq("WITH", "SINGLE", "PARTITION"):
                    node.set("single_partition", True)
                if self._match(TokenType.ORDER_BY):
                    node.set("order", exp.Order(expressions=self._parse_one_or_wrapped(self._parse_ordered)))
            return node

        def _at_table_argument_end(self) -> bool:
            c = self._curr
            if c is None:
                return False
            if c.token_type in (TokenType.COMMA, TokenType.R_PAREN, TokenType.PARTITION_BY, TokenType.ORDER_BY):
                return True
            return c.text.upper() == "WITH" and self._next is not None and self._next.text.upper() == "SINGLE"

        def _parse_one_or_wrapped(self, parse: Any) -> list[exp.Expression]:
            if self._match(TokenType.L_PAREN):
                items = self._parse_csv(parse)
                self._match_r_paren()
                return items
            return [parse()]

        # ---------------------------------------------------------- EXPLAIN KEYED
        def _parse_statement(self) -> exp.Expression | None:
            if self._curr and self._curr.text.upper() == "EXPLAIN" and self._curr.token_type != TokenType.STRING:
                if self._next and self._next.text.upper() == "KEYED":
                    self._advance(2)
                    first = self._curr
                    inner = super()._parse_statement() if first else None
                    if not isinstance(inner, (exp.Query, exp.DML, exp.Create)) or (
                        isinstance(inner, exp.Select) and not inner.expressions
                    ):
                        self.raise_error(
                            "Expected a query after EXPLAIN KEYED (a SELECT, or a DELETE / UPDATE of keyed_state(...))",
                            token=first or self._prev,
                        )
                    return self.expression(ExplainKeyed(this=inner))
                start = self._curr
                self._advance()
                text = self._find_sql(start, start) if not self._curr else None
                if text is not None:
                    return exp.Command(this="EXPLAIN", expression="")
                return self._parse_as_command(start)
            return super()._parse_statement()

    class Generator(Spark.Generator):
        TRANSFORMS = {
            **Spark.Generator.TRANSFORMS,
            KeyedGroup: lambda self, e: self.keyedgroup_sql(e),
            KeyedOption: lambda self, e: f"{self.sql(e, 'this')} = {self.sql(e, 'value')}",
            ExplainKeyed: lambda self, e: f"EXPLAIN KEYED {self.sql(e, 'this')}",
        }

        def anonymous_sql(self, expression: exp.Anonymous) -> str:
            """A ``TABLE(t)`` argument keeps its partitioning when rendered (a UDTF this project
            does not register gets it from Spark as written)."""
            sql = super().anonymous_sql(expression)
            if expression.name.upper() != "TABLE":
                return sql
            if expression.args.get("partition_by"):
                sql += f" PARTITION BY ({self.expressions(expression, key='partition_by', flat=True)})"
            elif expression.args.get("single_partition"):
                sql += " WITH SINGLE PARTITION"
            order = expression.args.get("order")
            if order is not None:
                sql += f" ORDER BY ({self.expressions(order, flat=True)})"
            return sql

        def keyedgroup_sql(self, e: KeyedGroup) -> str:
            parts = []
            if e.keys:
                parts.append(f"{self.seg('GROUP BY KEY')} {self.expressions(e, key='keys', flat=True)}")
            fn = e.function
            args = self.expressions(fn, flat=True)
            call = f"{fn.name}({args})"
            alias = f" AS {self.sql(e, 'alias')}" if e.args.get("alias") else ""
            parts.append(f"{self.seg('WITH STATE')} {call}{alias}")
            if e.args.get("order"):
                parts.append(f"{self.seg('ORDER BY')} {self.expressions(e, key='order', flat=True)}")
            if e.args.get("event_time"):
                parts.append(
                    f"{self.seg('EVENT TIME')} {self.sql(e, 'event_time')} WATERMARK {self.sql(e, 'watermark')}"
                )
            if e.args.get("ttl"):
                parts.append(f"{self.seg('TTL')} {self.sql(e, 'ttl')}")
            if e.args.get("initial_state"):
                parts.append(f"{self.seg('INITIAL STATE FROM')} {self.sql(e, 'initial_state')}")
            if e.args.get("options"):
                parts.append(f"{self.seg('OPTIONS')} ({self.expressions(e, key='options', flat=True)})")
            return "".join(parts)
