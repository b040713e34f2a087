-- Samza: table-table join of two changelogs by member id, emitting the joined changelog.
-- udf: profile_settings = samza_functions:ProfileSettingsJoin
CREATE OR REPLACE TEMPORARY VIEW profiles
USING csv OPTIONS (path '${here}/../data/profiles.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW settings
USING csv OPTIONS (path '${here}/../data/settings.csv', header 'true', inferSchema 'true');

SELECT member_id, ts, j.region, j.language
FROM (
  SELECT member_id, 'profile' AS side, region AS value, ts FROM profiles
  UNION ALL
  SELECT member_id, 'settings' AS side, language AS value, ts FROM settings
) changes
GROUP BY KEY member_id
WITH STATE profile_settings(side, value) AS j ORDER BY ts
ORDER BY member_id, ts
