package profiling

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/profile"
	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// stopTarget is a server whose stop_profile is counted and answered once
// answer is closed.
func stopTarget(t *testing.T) (srv *httptest.Server, answer chan struct{}, stops *atomic.Int32) {
	t.Helper()
	answer, stops = make(chan struct{}), &atomic.Int32{}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stop_profile" {
			http.NotFound(w, r)
			return
		}
		stops.Add(1)
		select {
		case <-answer:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	return srv, answer, stops
}

// deadRecording leaves r's target recording for owner, past its deadline,
// its lease lapsed: what a daemon killed mid-frame leaves for a restart that
// comes late.
func deadRecording(t *testing.T, owner *Plane, r vocab.LeaseRequest, saved json.RawMessage) vocab.Recording {
	t.Helper()
	ctx := context.Background()
	rec, err := mustAcquire(t, owner, r).Recording(ctx, 50*time.Millisecond, saved)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the deadline
	if _, err := owner.db.ExecContext(ctx, `UPDATE autocapture_profile_leases SET lease_until = 0 WHERE target = $1`, r.Target); err != nil {
		t.Fatal(err)
	}
	crash(owner)
	return rec
}

func leaseOwner(t *testing.T, s *Plane, target string) string {
	t.Helper()
	var owner string
	if err := s.db.QueryRowContext(context.Background(), `SELECT owner FROM autocapture_profile_leases WHERE target = $1`,
		target).Scan(&owner); err != nil {
		t.Fatalf("lease of %s: %v", target, err)
	}
	return owner
}

// TestProfileResumeWaitsForTheSweeper: the run's resumed step asks for its
// lease while the sweeper is stopping the earlier attempt's recording (a
// restart after the deadline and after the run's lease). It is not refused:
// it waits, bounded by its own context (a step cut short gets its context's
// error, and the lease stays the sweeper's), and once the stop is answered it
// takes the lease over, stopped, with the recording's listing and who
// stopped it when: it collects that frame, with no second start. (Before, it
// was refused "busy", and the frame was lost.)
func TestProfileResumeWaitsForTheSweeper(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		srv, answer, stops := stopTarget(t)
		prof := withProfiling(config.Profiling{SweepInterval: time.Hour, StopTimeout: 30 * time.Second})
		s := newPlane(t, db, false, prof, withTargets())
		doomed := newPlane(t, db, false, prof)
		ctx := context.Background()
		r := req(srv.URL, "run-late", "profile")
		listing := json.RawMessage(`{"files":{"old.json.gz":10}}`)
		first := deadRecording(t, doomed, r, listing)
		if err := s.sweepProfiles(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the sweeper's stop to reach the server", func() bool { return stops.Load() == 1 })

		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := s.Acquire(short, r)
		var refused *vocab.ProfileRefusal
		if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &refused) {
			t.Fatalf("acquire cut by the step's context: %v, want its deadline, no refusal", err)
		}
		if o := leaseOwner(t, s, srv.URL); !strings.HasPrefix(o, sweeperOwner) {
			t.Fatalf("after the step gave up the lease is %q's, want still the sweeper's", o)
		}

		type got struct {
			l   vocab.ProfileLease
			err error
		}
		done := make(chan got, 1)
		go func() {
			l, err := s.Acquire(ctx, r)
			done <- got{l, err}
		}()
		select {
		case g := <-done:
			t.Fatalf("acquire returned (%v) while the sweeper's stop was unanswered: want it to wait", g.err)
		case <-time.After(500 * time.Millisecond):
		}
		close(answer)
		var g got
		select {
		case g = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("acquire still waiting 30 s after the sweeper's stop was answered")
		}
		if g.err != nil {
			t.Fatalf("acquire after the sweeper's stop: %v", g.err)
		}
		rec := g.l.Resumed()
		if rec == nil || rec.State != vocab.LeaseStopped || string(rec.Saved) != string(listing) || !rec.Since.Equal(first.Since) {
			t.Fatalf("resumed %+v, want the swept recording, stopped, with its listing", rec)
		}
		if !strings.HasPrefix(rec.StoppedBy, sweeperOwner+s.id) || rec.StoppedAt.Before(rec.Deadline) {
			t.Errorf("resumed stopped by %q at %v (deadline %v), want this replica's sweeper, after the deadline",
				rec.StoppedBy, rec.StoppedAt, rec.Deadline)
		}
		if err := g.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if ev := runEvents(t, s, "run-late"); ev != "acquired,recording,sweeper_stopping,stopped,resumed,released" {
			t.Errorf("events %s: want the sweeper's stop, then the resumed step's takeover and release", ev)
		}
		if n := stops.Load(); n != 1 {
			t.Errorf("%d stops sent, want the sweeper's one", n)
		}
	})
}

// TestProfileResumeBeforeTheSweeper: the other order. The resumed step takes
// the dead owner's recording over before any sweep: the sweeps that follow
// neither claim it (no stop of theirs reaches the server) nor release it
// once the step's own stop was answered; the step stops, and releases.
func TestProfileResumeBeforeTheSweeper(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		srv, answer, stops := stopTarget(t)
		close(answer)
		prof := withProfiling(config.Profiling{SweepInterval: time.Hour, StopTimeout: 30 * time.Second})
		s := newPlane(t, db, false, prof, withTargets())
		doomed := newPlane(t, db, false, prof)
		ctx := context.Background()
		r := req(srv.URL, "run-first", "profile")
		deadRecording(t, doomed, r, nil)
		l := mustAcquire(t, s, r)
		if rec := l.Resumed(); rec == nil || rec.State != vocab.LeaseRecording || rec.StoppedBy != "" {
			t.Fatalf("resumed %+v, want the recording, for the step to stop", rec)
		}
		sweep := func() {
			t.Helper()
			if err := s.sweepProfiles(ctx); err != nil {
				t.Fatal(err)
			}
			if o := leaseOwner(t, s, srv.URL); o != s.id {
				t.Fatalf("after a sweep the lease is %q's, want the resumed step's (%s)", o, s.id)
			}
		}
		sweep()
		if err := l.Stopping(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := profile.StopProfile(ctx, http.DefaultClient, srv.URL); err != nil {
			t.Fatal(err)
		}
		if err := l.Stopped(ctx); err != nil {
			t.Fatal(err)
		}
		sweep()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := stops.Load(); n != 1 {
			t.Errorf("%d stops reached the server, want the step's one", n)
		}
		if ev := runEvents(t, s, "run-first"); ev != "acquired,recording,resumed,stopping,stopped,released" {
			t.Errorf("events %s: want the step's takeover, stop and release, nothing of the sweeper's", ev)
		}
	})
}

// TestProfileRecordedSaysWhatBecameOfTheFrame: a resumed step whose frame
// was recorded and whose lease is gone is refused "recorded" either way, and
// Lost only when the files were left on the server: the sweeper released
// the swept lease uncollected (the step then fails, saying where the files
// are), not when an earlier attempt collected them and released the target.
func TestProfileRecordedSaysWhatBecameOfTheFrame(t *testing.T) {
	prof := withProfiling(config.Profiling{SweepInterval: time.Hour, StopTimeout: time.Second, CollectWindow: 100 * time.Millisecond})
	db := testenv.DB{Path: t.TempDir() + "/a.db"}
	s := newPlane(t, db, false, prof)
	ctx := context.Background()
	left, collected := req("http://10.0.0.51:8000", "run-left", "profile"), req("http://10.0.0.52:8000", "run-got", "profile")
	sweptLease(t, s, newPlane(t, db, false, prof), left)
	sweptLease(t, s, newPlane(t, db, false, prof), collected)
	l := mustAcquire(t, s, collected) // the resumed attempt collects, then its daemon dies before the run records it
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // the collect window passes
	if err := s.sweepProfiles(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r    vocab.LeaseRequest
		lost bool
		want string
	}{
		{left, true, "the sweeper stopped that frame after its owner died, and its files were left on the server (not collected)"},
		{collected, false, "an earlier attempt collected its files and released the target"},
	} {
		_, err := s.Acquire(ctx, tc.r)
		refusal(t, err, vocab.RefusedRecorded, tc.want)
		var r *vocab.ProfileRefusal
		if errors.As(err, &r); r.Lost != tc.lost {
			t.Errorf("%s: refusal lost=%v, want %v (%s)", tc.r.RunID, r.Lost, tc.lost, r.Detail)
		}
	}
}
