package daemon

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// The faults an on-call meets at 3 a.m., each against the real binary and
// real components: S3 refusing writes and Slack answering 5xx here,
// PostgreSQL failing over in serve_faults_pg_test.go. The others of the set
// live beside what they break:
// Prometheus slow (e2e TestFaultQueryTimeout: a query that really outruns
// its budget on the real Prometheus, through the real binary), vLLM hanging
// on stop_profile (TestServeProfileFaultHangingStop), a bucket refusing the
// credentials (TestServeWithWrongS3CredentialsStillRuns), Slack answering
// 429 (TestServeSlackThroughRateLimits).

// refusingS3 is a reverse proxy in front of a real S3 server that answers
// writes (PUT, POST: object puts, tags, multipart) 503 SlowDown, as S3 does
// when it sheds load, while refusing is set; reads pass through. It keeps
// the Host header, so the client's signatures stay valid.
type refusingS3 struct {
	proxy    *httputil.ReverseProxy
	refusing atomic.Bool
	refused  atomic.Int64
}

func (p *refusingS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.refusing.Load() && (r.Method == http.MethodPut || r.Method == http.MethodPost) {
		p.refused.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>`+
			`<Message>Please reduce your request rate.</Message></Error>`)
		return
	}
	p.proxy.ServeHTTP(w, r)
}

// startRefusingS3 puts a refusingS3 in front of srv and returns it with a
// copy of srv whose Endpoint is the proxy.
func startRefusingS3(t *testing.T, srv *testenv.S3Server) (*refusingS3, testenv.S3Server) {
	t.Helper()
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &refusingS3{proxy: httputil.NewSingleHostReverseProxy(target)}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	via := *srv
	via.Endpoint = front.URL
	return p, via
}

// TestServeFaultS3RefusesWrites: the bucket answers every write 503
// SlowDown. Runs still complete: their artifacts are kept in the local spool,
// the steps record them pending and the runs API lists each upload pending
// with its failed attempts. Once the bucket takes writes again every
// artifact is uploaded (the spool empties, no upload left pending) and each
// run's manifest in the bucket is true of the run and of the stored bytes.
func TestServeFaultS3RefusesWrites(t *testing.T) {
	t.Parallel()
	const prefix, alerts = "faults", 3
	srv := testenv.StartVersityGW(t)
	proxy, via := startRefusingS3(t, srv)
	proxy.refusing.Store(true)
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, alerts)}
	web := httptest.NewServer(target)
	defer web.Close()
	o := &daemonOpts{Token: "s3", Playbooks: twoStepPlaybook("s3-refusing", "E2ES3Refusing", web.URL),
		Storage: s3Storage(&via, prefix, "gzip", writeSecret(t, srv.SecretAccessKey))}
	d := startDaemon(t, o)
	var ids []string
	for i := range alerts {
		code, b := d.post(t, webhookBody("E2ES3Refusing", fmt.Sprintf("5103%012d", i), "firing", time.Now().Add(-time.Minute)))
		if code != 200 || runID(b) == "" {
			t.Fatalf("webhook: %d %s", code, b)
		}
		ids = append(ids, runID(b))
	}
	pending := 0
	for _, id := range ids {
		r := waitFinished(t, d, id)
		pending += checkPendingRun(t, r)
	}
	for _, id := range ids {
		waitFor(t, 30*time.Second, "a failed upload attempt recorded for run "+id, func() bool {
			r := d.run(t, id)
			return len(r.Uploads) > 0 && r.Uploads[0].Attempts > 0 && r.Uploads[0].LastError != ""
		})
	}
	spooled := spoolFileCount(t, o.Dir)
	t.Logf("while refusing: %d runs finished with %d artifacts pending, %d files in the spool, %d writes refused",
		alerts, pending, spooled, proxy.refused.Load())
	if spooled < pending {
		t.Errorf("%d files in the spool, want at least the %d pending artifacts", spooled, pending)
	}

	proxy.refusing.Store(false)
	opened := time.Now()
	read := bucketReader(srv, prefix)
	for _, id := range ids {
		var r runs.Run
		waitFor(t, 40*time.Second, "every upload of run "+id, func() bool {
			r = d.run(t, id)
			return allUploaded(r)
		})
		checkManifest(t, d, r, read)
	}
	t.Logf("after the bucket took writes again: every upload landed and every manifest checked in %v; spool %d files; %d writes refused in all",
		time.Since(opened).Round(100*time.Millisecond), spoolFileCount(t, o.Dir), proxy.refused.Load())
	if n := spoolFileCount(t, o.Dir); n != 0 {
		t.Errorf("%d files left in the spool after every upload landed", n)
	}
	onlyUnderPrefix(t, srv, prefix, pending+alerts) // the artifacts and a manifest per run
}

// checkPendingRun checks a run finished while the bucket refused writes: it
// succeeded, its artifacts are pending, and the runs API lists each one's
// upload pending on this replica. It returns the number of artifacts.
func checkPendingRun(t *testing.T, r runs.Run) int {
	t.Helper()
	if r.Status != vocab.StatusSucceeded {
		t.Errorf("run %s %s (%s), want succeeded with its artifacts in the spool", r.ID, r.Status, r.Reason)
	}
	n := 0
	uploads := map[string]string{}
	for _, u := range r.Uploads {
		uploads[u.Key] = u.State
	}
	for _, st := range r.Steps {
		for _, a := range st.Artifacts {
			n++
			if !a.Pending || uploads[a.Key] != "pending" {
				t.Errorf("run %s step %s artifact %s: pending %v, upload %q; want pending in the spool", r.ID, st.ID, a.Key, a.Pending, uploads[a.Key])
			}
		}
	}
	if n == 0 {
		t.Errorf("run %s lists no artifact: the test proves nothing", r.ID)
	}
	return n
}

// allUploaded: the run spooled artifacts and every one has landed.
func allUploaded(r runs.Run) bool {
	for _, u := range r.Uploads {
		if u.State != "uploaded" {
			return false
		}
	}
	return len(r.Uploads) > 0 && r.Manifest != ""
}

// spoolFileCount counts the files under the daemon's spool folder.
func spoolFileCount(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(dir, "spool"), func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && !strings.Contains(p, string(filepath.Separator)+".") {
			n++
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return n
}

// TestServeFaultSlack5xx: for 8 s Slack answers every call 500 or 503 (its
// load balancer's HTML page, nothing applied). Four runs' threads still
// arrive whole once it answers again: one parent each, every step's reply
// and the end exactly once, in order, nothing lost and nothing doubled.
func TestServeFaultSlack5xx(t *testing.T) {
	t.Parallel()
	const alerts, outage = 4, 8 * time.Second
	stub := newSlack(t)
	stub.Fail("*", slackstub.ServerError(503).Fraction(0.5, 11).For(outage))
	stub.Fail("*", slackstub.ServerError(500).For(outage))
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, alerts)}
	srv := httptest.NewServer(target)
	defer srv.Close()
	d := startDaemon(t, &daemonOpts{Token: "slack", Playbooks: slackPlaybook(srv.URL), Notify: slackNotify(stub)})
	var ids []string
	for i := range alerts {
		code, b := d.post(t, webhookBody("E2ESlack", fmt.Sprintf("5e7e%012d", i), "firing", time.Now().Add(-time.Minute)))
		if code != 200 {
			t.Fatalf("webhook: %d %s", code, b)
		}
		ids = append(ids, runID(b))
	}
	for _, id := range ids {
		waitFinished(t, d, id)
	}
	want := []string{"step/slack-thread/fast", "step/slack-thread/slow", "close/finished"}
	waitFor(t, 60*time.Second, "every thread to show its end", func() bool {
		return threadsShowing(stub, "close/finished") == len(ids)
	})
	failed := 0
	for _, c := range stub.Calls() {
		if c.Outcome == slackstub.OutcomeServerError {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no call was answered 5xx: the test proves nothing")
	}
	time.Sleep(time.Second) // a doubled post would land by now
	for _, id := range ids {
		if keys := replyKeys(threadOf(t, stub, id)); strings.Join(keys, " ") != strings.Join(want, " ") {
			t.Errorf("run %s: thread %v, want %v (each once, in order)", id, keys, want)
		}
	}
	if n := len(stub.Messages(slackChannel)); n != alerts {
		t.Errorf("%d parents in the channel, want %d", n, alerts)
	}
	t.Logf("%d calls answered 5xx during the %v outage; %d threads whole, %v failures counted by the daemon", failed, outage, alerts,
		d.metric(t, `autocapture_notify_failures_total{reason="error",sink="slack"}`))
}
