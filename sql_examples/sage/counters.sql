-- SAGE: a per-key counter returning {key: count}.
-- udf: key_counter = sage_functions:CounterFunction
CREATE OR REPLACE TEMPORARY VIEW events
USING csv OPTIONS (path '${here}/../data/events.csv', header 'true', inferSchema 'true');

SELECT category, max(c.counts[category]) AS events
FROM (SELECT category, counts FROM events GROUP BY KEY category WITH STATE key_counter(*) AS c ORDER BY ts) c
GROUP BY category
ORDER BY category
