-- Samza: table-table join of two changelogs by member id, emitting the joined changelog.
-- Two inputs into one function, one state per member.
-- udf: profile_settings = samza_functions:ProfileSettingsJoin
CREATE OR REPLACE TEMPORARY VIEW profiles
USING csv OPTIONS (path '${here}/../data/profiles.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW settings
USING csv OPTIONS (path '${here}/../data/settings.csv', header 'true', inferSchema 'true');

SELECT member_id, j.ts, j.region, j.language
FROM profile_settings(profiles => TABLE(profiles), settings => TABLE(settings),
                      key => 'member_id', order_by => 'ts') AS j
ORDER BY member_id, ts
