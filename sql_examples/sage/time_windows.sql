-- SAGE: events per user per one-hour tumbling window (event time), running count.
-- udf: hourly = sage_functions:WindowAggregator
CREATE OR REPLACE TEMPORARY VIEW events
USING csv OPTIONS (path '${here}/../data/events.csv', header 'true', inferSchema 'true');

SELECT user_id, window_start, max(count) AS events
FROM (SELECT user_id, w.* FROM events GROUP BY KEY user_id WITH STATE hourly(ts) AS w ORDER BY ts)
GROUP BY user_id, window_start
ORDER BY user_id, window_start
