package capture

// Where the cause sits (issue: "this server, the whole fleet"), over the
// peers step's PeerView (views.go). CONTRACT STUB: the peers helper fills it in.

// scope returns the verdict's Scope ("" when the peers were not measured)
// and its evidence lines; it may append contributing factors to v
// (single-instance, fleet-wide, routing-imbalance). held are the rules that held.
func (r reading) scope(v *Verdict, held map[string]bool) (string, []string) { return "", nil }
