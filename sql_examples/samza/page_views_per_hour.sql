-- Samza: windowed aggregation, page views per member per hour (the table-function form).
-- udf: hourly_views = samza_functions:HourlyPageViews
CREATE OR REPLACE TEMPORARY VIEW page_views
USING csv OPTIONS (path '${here}/../data/page_views.csv', header 'true', inferSchema 'true');

SELECT member_id, hour, views
FROM hourly_views(TABLE(page_views), key => 'member_id', order_by => 'ts')
ORDER BY member_id, hour
