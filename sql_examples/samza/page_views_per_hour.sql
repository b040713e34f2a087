-- Samza: windowed aggregation, page views per member per hour.
-- udf: hourly_views = samza_functions:HourlyPageViews
CREATE OR REPLACE TEMPORARY VIEW page_views
USING csv OPTIONS (path '${here}/../data/page_views.csv', header 'true', inferSchema 'true');

SELECT member_id, hour, views
FROM page_views
GROUP BY KEY member_id
WITH STATE hourly_views(ts) ORDER BY ts
ORDER BY member_id, hour
