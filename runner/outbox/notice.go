package outbox

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// NotYetError says an operation cannot be delivered yet (a resume's reply
// before a replica claimed the run); the deliverer waits, counting no failure.
type NotYetError struct{ Wait time.Duration }

func (e NotYetError) Error() string { return "not ready yet" }

// resumedNotice is what a resume's reply says, as the on-call reads it:
// which replica goes on, after what, and which resume this is ("resumed by
// replica r1 after r0 stopped (kill or crash) — 2nd resume"). from and on
// are lease owners (runner/lifecycle's Owner); "another replica" is decided by their
// replica names (runs.replica), not by the process: a replica that
// restarted is the same replica.
func resumedNotice(n int, from, on string) string {
	nth := ""
	if n > 0 {
		nth = " — " + ordinal(n) + " resume"
	}
	was, now := replicaOf(from), replicaOf(on)
	switch {
	case from == "" && on == "": // recorded before replicas were named
		return "resumed after an interruption" + nth
	case on == "": // delivered before a replica claimed it (none within a lease), or after it finished
		return fmt.Sprintf("resumed after %s stopped (kill or crash); a live replica goes on", was) + nth
	case from == "": // its job was lost before it claimed the run
		return fmt.Sprintf("resumed by replica %s after an interruption", now) + nth
	case from == on: // this very process let its lease lapse, then took the run back
		return fmt.Sprintf("resumed by replica %s after it lost the run's lease (a stall or a store error)", now) + nth
	case was == now:
		return fmt.Sprintf("resumed by replica %s after it restarted (kill or crash)", now) + nth
	default:
		return fmt.Sprintf("resumed by replica %s after %s stopped (kill or crash)", now, was) + nth
	}
}

// replicaOf is the replica name a lease owner id starts with
// ("r1/4242/1a2b3c4d": r1; an owner of a version that named the host
// there: the host).
func replicaOf(owner string) string {
	name, _, _ := strings.Cut(owner, "/")
	return name
}

// ordinal writes n as 1st, 2nd, 3rd, 4th … 11th, 12th, 13th … 21st.
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

// shortDuration writes whole hours and minutes as 1h and 10m.
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.Round(time.Second).String()
}
