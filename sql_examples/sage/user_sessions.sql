-- SAGE: per-user sessions (count and running total), one output row per event.
-- udf: session_counter = sage_functions:UserSessionFunction
CREATE OR REPLACE TEMPORARY VIEW events
USING csv OPTIONS (path '${here}/../data/events.csv', header 'true', inferSchema 'true');

SELECT user_id, ts, s.session_count, s.total_value
FROM events
GROUP BY KEY user_id
WITH STATE session_counter(value) AS s ORDER BY ts
ORDER BY user_id, ts
