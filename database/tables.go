package database

// Tables are the typed statements on our tables for one dialect, one field
// per table (or group of tables written together). Each method takes the
// Querier to run on: the *sql.DB, or the caller's transaction.
type Tables struct {
	Keys     Keys
	Actions  Actions
	Seen     Seen
	Feedback Feedback
	Runs     Runs
	Verdicts Verdicts
	Uploads  Uploads
	Steps    Steps

	Cooldowns Cooldowns
	Threads   Threads
	Outbox    Outbox
	Groups    Groups
	Jobs      Jobs

	ProfilePause   ProfilePause
	ProfileEvents  ProfileEvents
	ProfileStarts  ProfileStarts
	ProfileReports ProfileReports
	ProfileLeases  ProfileLeases
}

// NewTables returns the statements for dialect d.
func NewTables(d Dialect) Tables {
	return Tables{Actions: Actions{d}, Seen: Seen{d}, Feedback: Feedback{d}, Runs: Runs{d}, Uploads: Uploads{d}, Cooldowns: Cooldowns{d},
		Threads: Threads{d}, Outbox: Outbox{d}, Groups: Groups{d}, Jobs: Jobs{d}, ProfilePause: ProfilePause{d},
		ProfileEvents: ProfileEvents{d}, ProfileReports: ProfileReports{d}, ProfileLeases: ProfileLeases{d}}
}
