package slackstub

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

type faultKind int

const (
	kindRateLimit faultKind = iota
	kindStatus
	kindDropBefore
	kindDropAfter
)

// Fault is a failure the stub injects into matching calls. Build one with
// RateLimited, ServerError, Drop or DropAfterApply and narrow it with
// Fraction, Between, For, Skip and Times; each returns a changed copy.
type Fault struct {
	kind       faultKind
	status     int
	retryAfter int
	fraction   float64
	seed       uint64
	from, to   time.Time
	forDur     time.Duration
	skip       int
	times      int
}

// RateLimited answers HTTP 429 with Retry-After: retryAfter seconds and
// {"ok":false,"error":"ratelimited"}, as Slack does; nothing is applied.
func RateLimited(retryAfter int) Fault {
	return Fault{kind: kindRateLimit, status: http.StatusTooManyRequests, retryAfter: retryAfter}
}

// ServerError answers with an HTTP status such as 500 or 503 and an HTML body; nothing is applied.
func ServerError(status int) Fault { return Fault{kind: kindStatus, status: status} }

// Drop closes the connection without an answer before the call is applied.
func Drop() Fault { return Fault{kind: kindDropBefore} }

// DropAfterApply applies the call (the message is recorded) and then closes
// the connection without an answer: the uncertain failure a client must
// resolve by reading back, not by blindly retrying.
func DropAfterApply() Fault { return Fault{kind: kindDropAfter} }

// Fraction makes the fault fire for about p (0..1) of the matching calls,
// drawn from a generator seeded with seed.
func (f Fault) Fraction(p float64, seed uint64) Fault { f.fraction, f.seed = p, seed; return f }

// Between makes the fault fire only for calls at or after from and before to
// (the server's clock); a zero bound is open.
func (f Fault) Between(from, to time.Time) Fault { f.from, f.to = from, to; return f }

// For makes the fault fire only during d from the moment it is installed with Fail.
func (f Fault) For(d time.Duration) Fault { f.forDur = d; return f }

// Skip lets the first n matching calls through untouched.
func (f Fault) Skip(n int) Fault { f.skip = n; return f }

// Times makes the fault fire at most n times (0: no limit).
func (f Fault) Times(n int) Fault { f.times = n; return f }

type faultState struct {
	Fault
	method string
	rnd    *rand.Rand
	seen   int
	fired  int
}

// Fail installs a fault for method ("chat.postMessage", …, "upload" for the
// bytes sent to an upload_url, or "*" for every method). Faults compose: they
// are tried in the order installed and the first that fires answers the call.
func (s *Server) Fail(method string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.forDur > 0 {
		f.from, f.to = s.now(), s.now().Add(f.forDur)
	}
	st := &faultState{Fault: f, method: method}
	if f.fraction > 0 {
		st.rnd = rand.New(rand.NewPCG(f.seed, f.seed^0x9e3779b97f4a7c15))
	}
	s.faults = append(s.faults, st)
}

// ClearFaults removes every installed fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// fault returns the first installed fault that fires for this call, or nil.
// Every fault for the method sees the call, so Skip and Times count calls.
func (s *Server) fault(method string, at time.Time) *faultState {
	var hit *faultState
	for _, f := range s.faults {
		if f.method != "*" && f.method != method {
			continue
		}
		if (!f.from.IsZero() && at.Before(f.from)) || (!f.to.IsZero() && !at.Before(f.to)) {
			continue
		}
		f.seen++
		if f.seen <= f.skip || (f.times > 0 && f.fired >= f.times) {
			continue
		}
		if f.rnd != nil && f.rnd.Float64() >= f.fraction {
			continue
		}
		if hit == nil {
			f.fired++
			hit = f
		}
	}
	return hit
}

// answer writes a fault that is answered before the call is applied.
func (f *faultState) answer(w http.ResponseWriter) Outcome {
	switch f.kind {
	case kindRateLimit:
		w.Header().Set("Retry-After", strconv.Itoa(f.retryAfter))
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(f.status)
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "ratelimited"})
		return OutcomeRateLimited
	case kindStatus:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.status)
		_, _ = w.Write([]byte("<html><body>stub: injected server error</body></html>"))
		return OutcomeServerError
	default:
		drop(w)
		return OutcomeDropped
	}
}

// drop closes the client's connection without writing an answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("slackstub: connection cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}
