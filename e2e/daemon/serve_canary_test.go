package daemon

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/vocab"
)

// The secrets canary (issue 15, "Secrets"): every secret the daemon holds is a
// fresh random value, the daemon is driven through every path that could
// echo one (auth failures, failing steps whose errors carry URLs, a Slack
// thread through Slack 5xx and 429, a badly signed interaction, S3 uploads and a manifest, a profile
// through an agent and one through an agent refusing the token, a broken
// reload, the runs API, /metrics, a graceful shutdown), and then each place a
// person or another system can read is searched for each canary in the forms
// it could take on the way (raw, base64 at every alignment, URL-escaped).

// newCanary is a value no code or fixture can hold by chance.
func newCanary(t *testing.T, what string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "CANARY-" + what + "-" + hex.EncodeToString(b)
}

// canaryForms are the spellings of secret worth searching for: itself, its
// URL escapes, and its base64 (standard and URL alphabets) at each of the
// three alignments it can have inside a longer encoded text (as the password
// inside a basic-auth header), cut to the characters that depend on it alone.
func canaryForms(secret string) []string {
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret), hex.EncodeToString([]byte(secret))}
	for pad := 0; pad < 3; pad++ {
		enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", pad) + secret))
		start := 0
		if pad > 0 {
			start = 4
		}
		core := enc[start : len(enc)-4]
		forms = append(forms, core, strings.NewReplacer("+", "-", "/", "_").Replace(core))
	}
	return forms
}

// leakScan searches named texts for canaries and keeps the tallies.
type leakScan struct {
	secrets map[string][]string // name → forms
	places  int
	bytes   int64
	hits    []string
}

func (s *leakScan) search(place string, text []byte) {
	s.places++
	s.bytes += int64(len(text))
	for name, forms := range s.secrets {
		for _, f := range forms {
			if i := bytes.Index(text, []byte(f)); i >= 0 {
				lo, hi := max(0, i-120), min(len(text), i+len(f)+120)
				s.hits = append(s.hits, fmt.Sprintf("%s: the %s (as %q) in …%s…", place, name, f, text[lo:hi]))
				break
			}
		}
	}
}

// pgRoleDSN creates a role with password and a database it owns in the
// shared cluster and returns the DSN naming both (loopback trusts, so the
// password is never checked: it only has to be in database.url).
func pgRoleDSN(t *testing.T, password string) (dsn string, dump func() []byte) {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	suffix := strings.ToLower(newCanary(t, "x")[len("CANARY-x-"):][:10])
	role, db := "canary_"+suffix, "canarydb_"+suffix
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", db, role),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dsn = fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", role, url.QueryEscape(password), pg.Host, pg.Port, db)
	// dump renders every row of every table of the database as JSON.
	dump = func() []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, pg.DSN(db))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		rows, err := c.Query(ctx, "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog','information_schema') AND table_type = 'BASE TABLE'")
		if err != nil {
			t.Fatal(err)
		}
		var tables []pgx.Identifier
		for rows.Next() {
			var s, n string
			if err := rows.Scan(&s, &n); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, pgx.Identifier{s, n})
		}
		rows.Close()
		var out bytes.Buffer
		for _, tb := range tables {
			rs, err := c.Query(ctx, "SELECT row_to_json(t)::text FROM "+tb.Sanitize()+" t")
			if err != nil {
				t.Fatal(err)
			}
			for rs.Next() {
				var line string
				if err := rs.Scan(&line); err != nil {
					t.Fatal(err)
				}
				out.WriteString(line + "\n")
			}
			rs.Close()
		}
		if len(tables) == 0 {
			t.Fatal("the daemon's database has no table: the dump proves nothing")
		}
		return out.Bytes()
	}
	return dsn, dump
}

// canaryPlaybook: a good step, a step against a refused port, the sim's
// /version, and a profile collected through agentURL; alertname picks it.
func canaryPlaybook(alertname, fast, refused, agentURL string) string {
	return fmt.Sprintf(`  - name: %[1]s
    match:
      - alertname="%[1]s"
    steps:
      - id: fast
        http: {url: "%[2]s/fast"}
      - id: refused
        continue_on_error: true
        http: {url: "%[3]s/refused?x=1"}
      - id: version
        http: {path: /version}
      - id: profile
        tier: 3
        timeout: 2m
        continue_on_error: true
        profile:
          duration: 2s
          stop_timeout: 30s
          collect: {agent: "%[4]s"}
`, alertname, fast, refused, agentURL)
}

// canaryAlert is a webhook body for alertname on instance.
func canaryAlert(alertname, fingerprint, status, instance string, startsAt time.Time) []byte {
	return []byte(fmt.Sprintf(`{"version":"4","groupKey":"{}:{}","status":%q,"receiver":"autocapture","alerts":[`+
		`{"status":%q,"labels":{"alertname":%q,"instance":%q,"severity":"page"},"annotations":{"summary":"canary"},"startsAt":%q,`+
		`"endsAt":"0001-01-01T00:00:00Z","fingerprint":%q}]}`,
		status, status, alertname, instance, startsAt.UTC().Format(time.RFC3339Nano), fingerprint))
}

// TestServeSecretsNeverLeak is the canary test (see the top of the file), on
// PostgreSQL with S3 and on SQLite with the local store.
func TestServeSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	t.Run("postgres+s3", func(t *testing.T) { canaryRun(t, true) })
	t.Run("sqlite+local", func(t *testing.T) { canaryRun(t, false) })
}

// canaryRun runs the canary test on PostgreSQL and S3 (remote) or on SQLite
// and the local store.
func canaryRun(t *testing.T, remote bool) {
	const user = "oncall-canary"
	secrets := map[string]string{
		"webhook bearer token":        newCanary(t, "bearer"),
		"webhook basic-auth password": newCanary(t, "basic"),
		"Slack bot token":             "xoxb-" + newCanary(t, "slack"),
		"Slack signing secret":        newCanary(t, "signing"),
		"profiling.agent_token":       newCanary(t, "agent"),
		"web.link_secret":             newCanary(t, "link"),
		"PostgreSQL password":         newCanary(t, "pg"),
	}
	var srv *testenv.S3Server
	if remote {
		srv = testenv.StartVersityGW(t) // its root credentials are fresh random values too
		secrets["S3 access key id"] = srv.AccessKeyID
		secrets["S3 secret access key"] = srv.SecretAccessKey
	} else {
		delete(secrets, "PostgreSQL password")
	}
	scan := &leakScan{secrets: map[string][]string{}}
	for name, v := range secrets {
		scan.secrets[name] = canaryForms(v)
	}
	scan.secrets["webhook basic-auth header"] = []string{base64.StdEncoding.EncodeToString([]byte(user + ":" + secrets["webhook basic-auth password"]))}

	// The world: a target, a refused port, two armed sims, an agent over each
	// (one holding the daemon's token, one another), Slack, S3, PostgreSQL.
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 8)}
	web := httptest.NewServer(target)
	defer web.Close()
	refused := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	simGood, simBad := startPFSim(t, pfSimOpts{}), startPFSim(t, pfSimOpts{})
	agentGood, agentGoodURL := startAgent(t, simGood.Dir, secrets["profiling.agent_token"])
	agentBad, agentBadURL := startAgent(t, simBad.Dir, "another-token-"+hex.EncodeToString([]byte("agent-b")))
	stub := slackstub.New(t, slackstub.WithChannel(slackChannel, "alerts"), slackstub.WithToken(secrets["Slack bot token"]))
	// Slack failing now and then: the errors the daemon logs and retries.
	stub.Fail("chat.postMessage", slackstub.ServerError(503).Skip(1).Times(1))
	stub.Fail("chat.update", slackstub.ServerError(500).Times(1))
	stub.Fail("*", slackstub.RateLimited(1).Skip(4).Times(1))
	var dsn string
	pgDump := func() []byte { return nil }
	if remote {
		dsn, pgDump = pgRoleDSN(t, secrets["PostgreSQL password"])
	}

	playbooks := "playbooks:\n" + canaryPlaybook("CanaryLeak", web.URL, refused, agentGoodURL) +
		canaryPlaybook("CanaryLeakBadAgent", web.URL, refused, agentBadURL)
	o := &daemonOpts{
		Token:       secrets["webhook bearer token"],
		DatabaseURL: dsn,
		Playbooks:   playbooks,
		Notify: fmt.Sprintf("  slack:\n    enabled: true\n    token: %q\n    signing_secret: %q\n    api_url: %q\n    channel: %s\n",
			secrets["Slack bot token"], secrets["Slack signing secret"], stub.URL(), slackChannel),
		Profiling: fmt.Sprintf("  max_concurrent: 8\n  max_per_hour: 100\n  max_duration: 1m\n  agent_token: %q\n",
			secrets["profiling.agent_token"]),
	}
	if remote {
		o.Storage = fmt.Sprintf("  backend: s3\n  compression: gzip\n  s3:\n    bucket: %s\n    prefix: canary\n    endpoint: %s\n"+
			"    path_style: true\n    region: %s\n    access_key_id: %s\n    secret_access_key: %q\n",
			srv.Bucket, srv.Endpoint, srv.Region, srv.AccessKeyID, srv.SecretAccessKey)
	}
	o.Web = fmt.Sprintf("  link_secret: %q\n", secrets["web.link_secret"])
	o.BasicAuth = fmt.Sprintf("{username: %s, password: %q}", user, secrets["webhook basic-auth password"])
	d := launchDaemon(t, o, "autocapture-canary")
	cfg := d.Config
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	// The control: the search finds every secret in the config, where it is
	// by design, and the basic-auth password inside an Authorization header.
	control := &leakScan{secrets: scan.secrets}
	control.search("the config", []byte(text))
	for _, u := range []string{user, "ab", "abc"} { // the password at each base64 alignment
		control.search("a basic-auth header", []byte("Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte(u+":"+secrets["webhook basic-auth password"]))))
	}
	// Every secret in the config but the header; the password in each header,
	// the whole header in the first.
	if want := len(scan.secrets) - 1 + 3 + 1; len(control.hits) != want {
		t.Fatalf("the control search found %d of %d: the search is broken:\n%s", len(control.hits), want, strings.Join(control.hits, "\n"))
	}

	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	d.Proc.WaitHTTP(t, d.URL+"/-/ready", 30*time.Second)
	if remote {
		waitFor(t, 30*time.Second, "autocapture_storage_up to be 1", func() bool {
			return d.metric(t, `autocapture_storage_up{backend="s3"}`) == 1
		})
	}

	// Every answer the daemon gives is kept and searched.
	answers, presigned := 0, 0
	// A redirect's Location is an answer too (a presigned URL would carry
	// the access key id): it is searched, not followed.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	call := func(what, method, path string, body []byte, header http.Header) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, d.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > 0 {
			req.Header.Set("Content-Type", "application/json") // a header below replaces it
		}
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var hdr bytes.Buffer
		resp.Header.Write(&hdr)
		if remote && resp.StatusCode == http.StatusFound {
			// An artifact's route redirects to a URL presigned now: SigV4
			// names the access key id in X-Amz-Credential by design (AWS
			// does not hold it secret; the secret key signs and never shows).
			// That one place is taken out and counted; anywhere else it is a leak.
			cred := []byte("X-Amz-Credential=" + srv.AccessKeyID + "%2F")
			presigned += bytes.Count(hdr.Bytes(), cred)
			b = bytes.ReplaceAll(b, cred, []byte("X-Amz-Credential=(the access key id)%2F"))
			hdr = *bytes.NewBuffer(bytes.ReplaceAll(hdr.Bytes(), cred, []byte("X-Amz-Credential=(the access key id)%2F")))
		}
		scan.search("answer to "+what+" (headers)", hdr.Bytes())
		scan.search("answer to "+what, b)
		answers++
		return resp.StatusCode, b
	}
	bearer := http.Header{"Authorization": {"Bearer " + secrets["webhook bearer token"]}}
	basic := func(pw string) http.Header {
		return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))}}
	}

	// Webhooks: refused without auth, with a wrong token (the canary with a
	// byte more or less), a wrong password; accepted with either credential.
	startsAt := time.Now().Add(-time.Minute)
	alert := canaryAlert("CanaryLeak", "ca7a1eafca7a1eaf", "firing", simGood.Inst, startsAt)
	for what, h := range map[string]http.Header{
		"webhook without auth":               nil,
		"webhook with a longer token":        {"Authorization": {"Bearer " + secrets["webhook bearer token"] + "x"}},
		"webhook with a shorter token":       {"Authorization": {"Bearer " + secrets["webhook bearer token"][:20]}},
		"webhook with a wrong password":      basic(secrets["webhook basic-auth password"] + "x"),
		"webhook with the password as token": {"Authorization": {"Bearer " + secrets["webhook basic-auth password"]}},
	} {
		if code, b := call(what, "POST", "/hooks/alertmanager", alert, h); code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", what, code, b)
		}
	}
	code, b := call("webhook (bearer)", "POST", "/hooks/alertmanager", alert, bearer)
	good := runID(b)
	if code != 200 || good == "" {
		t.Fatalf("webhook: %d %s", code, b)
	}
	code, b = call("webhook (basic auth)", "POST", "/hooks/alertmanager",
		canaryAlert("CanaryLeakBadAgent", "bad0a9e7bad0a9e7", "firing", simBad.Inst, startsAt), basic(secrets["webhook basic-auth password"]))
	bad := runID(b)
	if code != 200 || bad == "" {
		t.Fatalf("webhook (basic auth): %d %s", code, b)
	}

	// Slack interactions: a wrong signature, a stale one, and one signed right.
	form := "payload=" + url.QueryEscape(`{"type":"view_closed","user":{"id":"U1"}}`)
	ts := fmt.Sprint(time.Now().Unix())
	mac := hmac.New(sha256.New, []byte(secrets["Slack signing secret"]))
	mac.Write([]byte("v0:" + ts + ":" + form))
	signed := "v0=" + hex.EncodeToString(mac.Sum(nil))
	formHdr := func(ts, sig string) http.Header {
		return http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "X-Slack-Request-Timestamp": {ts}, "X-Slack-Signature": {sig}}
	}
	if code, b := call("interaction with a wrong signature", "POST", "/hooks/slack/interactions", []byte(form),
		formHdr(ts, "v0="+strings.Repeat("ab", 32))); code != http.StatusUnauthorized {
		t.Errorf("interaction with a wrong signature: %d %s, want 401", code, b)
	}
	if code, b := call("interaction with a stale timestamp", "POST", "/hooks/slack/interactions", []byte(form),
		formHdr(fmt.Sprint(time.Now().Add(-time.Hour).Unix()), signed)); code != http.StatusUnauthorized {
		t.Errorf("interaction with a stale timestamp: %d %s, want 401", code, b)
	}
	if code, b := call("interaction signed right", "POST", "/hooks/slack/interactions", []byte(form), formHdr(ts, signed)); code != 200 {
		t.Errorf("interaction signed right: %d %s, want 200", code, b)
	}

	// The runs end; the good one collects the profile through its agent, the
	// other's agent refuses the token; both threads close.
	rGood := waitFinal(t, d, good, 2*time.Minute)
	waitFinal(t, d, bad, 2*time.Minute)
	for _, r := range []struct {
		id, wantProfile string
	}{{good, ""}, {bad, "token"}} {
		run := d.run(t, r.id)
		var refusedErr, profileErr string
		for _, st := range run.Steps {
			switch st.ID {
			case "refused":
				refusedErr = st.Error
			case "profile":
				profileErr = st.Error + " " + st.Reason + " " + st.Summary
			}
		}
		if !strings.Contains(refusedErr, "refused") {
			t.Errorf("run %s: the refused step's error %q does not say refused: the test proves less", r.id, refusedErr)
		}
		if r.wantProfile != "" && !strings.Contains(strings.ToLower(profileErr), r.wantProfile) {
			t.Errorf("run %s: the profile step %q does not say the agent refused the token", r.id, profileErr)
		}
	}
	if ps := profileStep(t, rGood); ps.Status != vocab.StatusSucceeded || len(ps.Artifacts) == 0 {
		t.Errorf("the profile through the good agent: %s with %d artifacts, want succeeded with the trace: %+v", ps.Status, len(ps.Artifacts), ps)
	}
	waitFor(t, 60*time.Second, "both threads to close and both manifests", func() bool {
		closed := 0
		for _, m := range stub.Messages(slackChannel) {
			if strings.Contains(strings.Join(replyKeys(m), " "), "close/") {
				closed++
			}
		}
		return closed >= 2 && d.run(t, good).Manifest != "" && d.run(t, bad).Manifest != ""
	})
	// A verdict click, signed right, on the good run's thread (recorded;
	// the thread may be updated), and the same click replayed (refused).
	parent := threadOf(t, stub, good)
	click := fmt.Sprintf(`{"type":"block_actions","user":{"id":"U0CANARY","name":"carol"},"channel":{"id":%q},"message":{"ts":%q},`+
		`"actions":[{"action_id":%q,"value":%q}]}`, slackChannel, parent.TS, slacknotify.ActionVerdictRight, slacknotify.FeedbackValue(good, "v1"))
	clickForm := "payload=" + url.QueryEscape(click)
	cts := fmt.Sprint(time.Now().Unix())
	cmac := hmac.New(sha256.New, []byte(secrets["Slack signing secret"]))
	cmac.Write([]byte("v0:" + cts + ":" + clickForm))
	csig := "v0=" + hex.EncodeToString(cmac.Sum(nil))
	if code, b := call("a verdict click", "POST", "/hooks/slack/interactions", []byte(clickForm), formHdr(cts, csig)); code != 200 {
		t.Errorf("a verdict click: %d %s, want 200", code, b)
	}
	if code, b := call("a replayed click", "POST", "/hooks/slack/interactions", []byte(clickForm), formHdr(cts, csig)); code != http.StatusUnauthorized {
		t.Errorf("a replayed click: %d %s, want 401", code, b)
	}

	// The resolution, through basic auth.
	if code, b := call("resolution (basic auth)", "POST", "/hooks/alertmanager",
		canaryAlert("CanaryLeak", "ca7a1eafca7a1eaf", "resolved", simGood.Inst, startsAt), basic(secrets["webhook basic-auth password"])); code != 200 {
		t.Errorf("resolution: %d %s", code, b)
	}

	// A reload of a broken playbook file, by signal and by the API.
	pbFile := filepath.Join(o.Dir, "playbooks.yaml")
	if err := os.WriteFile(pbFile, []byte(playbooks+"    bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the broken edit to be noticed", func() bool {
		return d.metric(t, "autocapture_config_last_reload_successful") == 0
	})
	if code, b := call("reload of a broken file", "POST", "/-/reload", nil, bearer); code != 500 {
		t.Errorf("/-/reload of a broken file: %d %s, want 500", code, b)
	}

	// The runs API, the run pages' data, the artifacts by link, /metrics.
	for _, p := range []string{"/api/v1/runs", "/api/v1/runs?alertname=CanaryLeak", "/api/v1/runs/" + good, "/api/v1/runs/" + bad,
		"/api/v1/runs/" + good + "/profile", "/api/v1/runs/" + bad + "/profile", "/api/v1/profiling", "/api/v1/runs/nope"} {
		if code, b := call("GET "+p, "GET", p, nil, bearer); code != 200 && p != "/api/v1/runs/nope" {
			t.Errorf("GET %s: %d %s", p, code, b)
		}
		call("GET "+p+" (wrong token)", "GET", p, nil, http.Header{"Authorization": {"Bearer " + secrets["web.link_secret"]}})
	}
	for _, run := range []string{good, bad} {
		for _, st := range d.run(t, run).Steps {
			for _, a := range st.Artifacts {
				call("artifact "+a.Key, "GET", "/artifacts/"+run+"/"+a.Key, nil, bearer)
			}
		}
	}
	// The links the thread gives (signed with web.link_secret).
	links := 0
	for _, m := range stub.Messages(slackChannel) {
		all, _ := json.Marshal(m)
		for _, part := range strings.Split(string(all), `"`) {
			if i := strings.Index(part, d.URL+"/artifacts/"); i >= 0 {
				u := strings.ReplaceAll(part[i+len(d.URL):], `\u0026`, "&")
				u = strings.ReplaceAll(u, "&amp;", "&") // Slack unescapes a link's &amp;
				u, _, _ = strings.Cut(u, "|")           // mrkdwn: <url|text>
				u, _, _ = strings.Cut(u, `\u003e`)
				if code, b := call("thread link", "GET", u, nil, nil); code == 200 || (remote && code == http.StatusFound) {
					links++
				} else {
					t.Errorf("thread link %s: %d %s", u, code, b)
				}
			}
		}
	}
	if links == 0 {
		t.Error("no artifact link in the thread answered 200: the link secret's path went untested")
	}
	call("GET /metrics", "GET", "/metrics", nil, nil)

	// A graceful shutdown, then the agents'.
	d.Proc.Stop()
	if err := d.Proc.Err(); err != nil {
		t.Errorf("SIGTERM: the daemon exited with %v, want 0", err)
	}
	agentGood.Stop()
	agentBad.Stop()

	// `autocapture check` of the same config (and of it with a broken
	// playbook: its errors quote the files) says what it found, not the secrets.
	for what, args := range map[string][]string{
		"autocapture check of the config":          {"check", "--config.file", cfg},
		"autocapture check of the broken playbook": {"check", "--config.file", cfg, pbFile},
	} {
		out, _ := exec.Command(bin, args...).CombinedOutput()
		if len(out) == 0 {
			t.Errorf("%s printed nothing", what)
		}
		scan.search(what, out)
	}

	// Search: the logs, the bucket, the thread, storage.path, the database.
	scan.search("the daemon's stdout/stderr", []byte(d.Proc.Logs()))
	scan.search("the good agent's log", []byte(agentGood.Logs()))
	scan.search("the refusing agent's log", []byte(agentBad.Logs()))
	objects, manifests := 0, 0
	if remote {
		objects, manifests = searchBucket(t, scan, srv)
	}
	conv, _ := json.Marshal(stub.Messages(slackChannel))
	calls, _ := json.Marshal(stub.Calls())
	failed := 0
	for _, c := range stub.Calls() {
		if c.Outcome == slackstub.OutcomeServerError || c.Outcome == slackstub.OutcomeRateLimited {
			failed++
		}
	}
	if failed < 2 {
		t.Errorf("%d Slack calls failed, want the faults' (at least 2): the error paths went untested", failed)
	}
	scan.search("the Slack stand-in's conversation", append([]byte(stub.Dump()), conv...))
	scan.search("the Slack stand-in's calls", calls)
	files := 0
	err = filepath.WalkDir(o.Dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || p == cfg { // the config holds the secrets by design
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		scan.search("storage.path file "+p, b)
		if zr, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
			plain, _ := io.ReadAll(zr)
			scan.search("storage.path file "+p+" (decompressed)", plain)
		}
		if e.Name() == "manifest.json" {
			manifests++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if remote {
		scan.search("every row of the PostgreSQL database", pgDump())
	}
	if manifests < 2 {
		t.Errorf("%d manifests stored, want both runs'", manifests)
	}

	if remote && presigned == 0 {
		t.Error("no artifact answer redirected to a presigned URL: the test no longer sees what it excuses")
	}
	if remote {
		t.Logf("%d presigned redirects name the access key id in X-Amz-Credential (SigV4, by design; taken out before the search)", presigned)
	}
	t.Logf("searched %d places (%d answers, %d objects, %d storage.path files, %d thread links answered, the logs, the thread and calls, and the PostgreSQL rows when remote), %d bytes, for %d secrets: %d hits",
		scan.places, answers, objects, files, links, scan.bytes, len(scan.secrets), len(scan.hits))
	for _, h := range scan.hits {
		t.Errorf("leak: %s", h)
	}
}

// TestServeSecretsStayOutOfStartupErrors: a daemon that cannot start (or
// cannot reach its database) says why without the secret that was part of
// the bad value: a database.url whose port does not parse or refuses, a
// link_secret too short.
func TestServeSecretsStayOutOfStartupErrors(t *testing.T) {
	t.Parallel()
	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	short := "C-" + hex.EncodeToString([]byte(newCanary(t, "s")[len("CANARY-s-"):][:4])) // 10 bytes: under link_secret's 16
	tests := []struct {
		name, secret, config string
		want                 string // in the output
	}{
		{name: "database.url with a bad port", secret: newCanary(t, "pgport"),
			config: "database:\n  url: \"postgres://u:%s@127.0.0.1:notaport/db\"\n", want: "database"},
		{name: "database.url refusing", secret: newCanary(t, "pgrefused"),
			config: fmt.Sprintf("database:\n  url: \"postgres://u:%%s@127.0.0.1:%d/db?connect_timeout=2\"\n", testenv.FreePort(t)), want: "database"},
		{name: "link_secret too short", secret: short, config: "web:\n  listen_address: 127.0.0.1:0\n  link_secret: %q\n", want: "link_secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "autocapture.yaml")
			text := fmt.Sprintf(tt.config, tt.secret) + fmt.Sprintf("storage:\n  path: %q\nplaybooks: []\n", dir)
			if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			p := testenv.StartProcess(t, "autocapture-badstart", exec.Command(bin, "serve", "--config.file", cfg))
			select {
			case <-p.Done():
			case <-time.After(30 * time.Second):
				p.Stop()
			}
			logs := p.Logs()
			scan := &leakScan{secrets: map[string][]string{tt.name: canaryForms(tt.secret)}}
			scan.search("the output", []byte(logs))
			if !strings.Contains(logs, tt.want) {
				t.Errorf("the output does not name %s:\n%s", tt.want, logs)
			}
			t.Logf("exited: %v; %d bytes of output searched, %d hits", p.Exited(), scan.bytes, len(scan.hits))
			for _, h := range scan.hits {
				t.Errorf("leak: %s", h)
			}
		})
	}
}

// searchBucket searches every object of the bucket (its bytes, decompressed
// when gzip, and its metadata) and counts the objects and manifests.
func searchBucket(t *testing.T, scan *leakScan, srv *testenv.S3Server) (objects, manifests int) {
	t.Helper()
	list, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range list.Contents {
		key := aws.ToString(obj.Key)
		out, err := srv.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: obj.Key})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(out.Body)
		out.Body.Close()
		meta, _ := json.Marshal(out.Metadata)
		scan.search("object "+key, append(body, meta...))
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			plain, _ := io.ReadAll(zr)
			scan.search("object "+key+" (decompressed)", plain)
		}
		objects++
	}
	for _, obj := range list.Contents {
		if strings.HasSuffix(aws.ToString(obj.Key), "/manifest.json") {
			manifests++
		}
	}
	if objects < 6 {
		t.Errorf("%d objects in the bucket: want the artifacts and both manifests", objects)
	}
	return objects, manifests
}
