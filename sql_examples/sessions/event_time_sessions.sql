-- Per-user sessions closed by an event-time timer after 30 minutes of inactivity.
-- Over a stream (ks.start / ks.run) the watermark fires the timers; as a batch query the
-- timers still due fire at end of input.
-- udf: click_sessions = sessions_functions:ClickSessions
CREATE OR REPLACE TEMPORARY VIEW clicks
USING csv OPTIONS (path '${here}/../data/clicks.csv', header 'true', inferSchema 'true');

SELECT user_id, s.session_start, s.session_end, s.clicks
FROM clicks
GROUP BY KEY user_id
WITH STATE click_sessions(ts) AS s ORDER BY ts
EVENT TIME ts WATERMARK INTERVAL 5 MINUTES
ORDER BY user_id, session_start
