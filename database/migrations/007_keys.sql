-- 7: autocapture_keys: keys the daemon generates once and every replica
-- shares, by name; "link-signing" signs the artifact links in threads when
-- web.link_secret is not set (see linkKey).
CREATE TABLE autocapture_keys (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
