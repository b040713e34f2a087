-- SAGE: one class, used keyed (per user) and unkeyed (one global state) in one statement.
-- udf: flexible = sage_functions:FlexibleFunction
CREATE OR REPLACE TEMPORARY VIEW events
USING csv OPTIONS (path '${here}/../data/events.csv', header 'true', inferSchema 'true');

SELECT scope, max(count) AS events FROM (
  SELECT scope, count FROM events GROUP BY KEY user_id WITH STATE flexible(value) ORDER BY ts
  UNION ALL
  SELECT scope, count FROM events WITH STATE flexible(value) ORDER BY ts
) GROUP BY scope ORDER BY scope
