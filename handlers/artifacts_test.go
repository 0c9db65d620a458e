package handlers

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// runArtifacts is a run service that knows which keys each run recorded.
type runArtifacts map[string][]string

func (r runArtifacts) RunArtifact(_ context.Context, runID, key string) (bool, error) {
	keys, ok := r[runID]
	if !ok {
		return false, fmt.Errorf("%w: %s", runs.ErrNotFound, runID)
	}
	for _, k := range keys {
		if k == key {
			return true, nil
		}
	}
	return false, nil
}

const (
	artRun   = "0198-run-a"
	artKey   = "2026/05/01/VLLMHighTTFT/0198-run-a/vllm/snapshot/prometheus.json"
	chartKey = "2026/05/01/VLLMHighTTFT/0198-run-a/vllm/chart/chart.png"
	otherKey = "2026/05/01/VLLMHighTTFT/0198-run-b/vllm/snapshot/prometheus.json"
)

type artifactFixture struct {
	srv    *httptest.Server
	signer *links.Signer
	now    time.Time
	text   []byte // the JSON artifact as put
	png    []byte
}

// newArtifactServer serves the route over plain HTTP from a real Server
// against store; auth, when set, guards the API.
func newArtifactServer(t *testing.T, store vocab.Store, redirect bool, auth config.Auth) *artifactFixture {
	t.Helper()
	ctx := context.Background()
	f := &artifactFixture{now: time.Unix(1_800_000_000, 0)}
	f.text = []byte(`{"status":"success","data":` + strings.Repeat(`{"metric":{"__name__":"vllm:num_requests_waiting"},"value":[1,"42"]},`, 2000) + `{}}`)
	f.png = append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7, 1, 3}, 5000)...)
	for key, b := range map[string][]byte{artKey: f.text, chartKey: f.png, otherKey: []byte(`{"other":"run"}`)} {
		if _, err := store.Put(ctx, key, bytes.NewReader(b), vocab.ObjectMeta{}); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if f.signer, err = links.NewSigner([]byte("artifact-test-key-0123456789")); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Runs: newFakeRuns(), Registry: prometheus.NewRegistry(), Log: zap.NewNop(), Auth: auth,
		Now: func() time.Time { return f.now },
		Artifacts: &ArtifactOptions{Runs: runArtifacts{artRun: {artKey, chartKey}, "0198-run-b": {otherKey}},
			Store: store, Links: f.signer, Redirect: redirect}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(s)
	t.Cleanup(f.srv.Close)
	return f
}

// link is the thread's link to key of run, valid for ttl from f.now.
func (f *artifactFixture) link(run, key string, ttl time.Duration) string {
	return f.srv.URL + "/artifacts/" + run + "/" + key + "?" + f.signer.Sign(run, key, f.now.Add(ttl)).Encode()
}

// get fetches u with the given Accept-Encoding ("" sends none; Go's
// transport then asks for gzip itself unless told not to).
func get(t *testing.T, method, u, acceptEncoding string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func newLocal(t *testing.T) *storage.Local {
	t.Helper()
	l, err := storage.NewLocal(t.TempDir(), storage.WithLocalCompression(storage.CompressionGzip))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestArtifactLinkServesExactBytes: a click on a thread's link gets the
// artifact's bytes, decoded for a client that takes no gzip, as stored with
// Content-Encoding for one that does; HEAD says the same without a body.
func TestArtifactLinkServesExactBytes(t *testing.T) {
	f := newArtifactServer(t, newLocal(t), false, config.Auth{})
	u := f.link(artRun, artKey, time.Hour)

	t.Run("no Accept-Encoding: decoded", func(t *testing.T) {
		res, body := get(t, http.MethodGet, u, "identity")
		if res.StatusCode != 200 || sha(body) != sha(f.text) {
			t.Fatalf("%d, %d bytes sha %s, want the %d bytes put", res.StatusCode, len(body), sha(body)[:12], len(f.text))
		}
		if res.Header.Get("Content-Encoding") != "" || res.Header.Get("Content-Type") != "application/json" ||
			res.Header.Get("ETag") != `"`+sha(f.text)+`"` || res.ContentLength != int64(len(f.text)) ||
			res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Content-Disposition") != "" {
			t.Fatalf("headers %v (length %d)", res.Header, res.ContentLength)
		}
	})
	t.Run("gzip accepted: stored bytes, Content-Encoding gzip", func(t *testing.T) {
		res, body := get(t, http.MethodGet, u, "br;q=1.0, gzip;q=0.8")
		if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != "gzip" || len(body) >= len(f.text) {
			t.Fatalf("%d, encoding %q, %d bytes", res.StatusCode, res.Header.Get("Content-Encoding"), len(body))
		}
		if res.Header.Get("ETag") != `"`+sha(body)+`"` || res.ContentLength != int64(len(body)) {
			t.Fatalf("ETag %s length %d for %d stored bytes", res.Header.Get("ETag"), res.ContentLength, len(body))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		if sha(plain) != sha(f.text) {
			t.Fatal("the gzip body does not decode to the bytes put")
		}
	})
	t.Run("gzip;q=0 refused: decoded", func(t *testing.T) {
		res, body := get(t, http.MethodGet, u, "gzip;q=0, identity")
		if res.Header.Get("Content-Encoding") != "" || sha(body) != sha(f.text) {
			t.Fatalf("encoding %q, body sha %s", res.Header.Get("Content-Encoding"), sha(body)[:12])
		}
	})
	t.Run("HEAD", func(t *testing.T) {
		res, body := get(t, http.MethodHead, u, "identity")
		if res.StatusCode != 200 || len(body) != 0 || res.ContentLength != int64(len(f.text)) || res.Header.Get("ETag") != `"`+sha(f.text)+`"` {
			t.Fatalf("%d, %d body bytes, length %d", res.StatusCode, len(body), res.ContentLength)
		}
	})
	t.Run("If-None-Match", func(t *testing.T) {
		res, body := get(t, http.MethodGet, u, "identity", "If-None-Match", `"`+sha(f.text)+`"`)
		if res.StatusCode != http.StatusNotModified || len(body) != 0 {
			t.Fatalf("%d with %d bytes, want 304", res.StatusCode, len(body))
		}
	})
	t.Run("an image renders in place, exact bytes", func(t *testing.T) {
		res, body := get(t, http.MethodGet, f.link(artRun, chartKey, time.Hour), "gzip")
		if res.StatusCode != 200 || sha(body) != sha(f.png) || res.Header.Get("Content-Type") != "image/png" ||
			res.Header.Get("Content-Encoding") != "" || res.Header.Get("Content-Disposition") != "" {
			t.Fatalf("%d %v", res.StatusCode, res.Header)
		}
	})
}

func TestArtifactDownloadsWhatABrowserShouldNotRender(t *testing.T) {
	for ct, want := range map[string]bool{"image/png": true, "text/plain; charset=utf-8": true, "application/json": true,
		"text/html": false, "image/svg+xml": false, "application/x-ndjson": false, "application/octet-stream": false, "": false} {
		if inline(ct) != want {
			t.Errorf("inline(%q) = %v, want %v", ct, !want, want)
		}
	}
	l := newLocal(t)
	f := newArtifactServer(t, l, false, config.Auth{})
	key := "2026/05/01/VLLMHighTTFT/0198-run-a/vllm/http/page.html"
	if _, err := l.Put(context.Background(), key, strings.NewReader("<script>alert(1)</script>"), vocab.ObjectMeta{ContentType: "text/html"}); err != nil {
		t.Fatal(err)
	}
	s, _ := New(Options{Runs: newFakeRuns(), Registry: prometheus.NewRegistry(), Log: zap.NewNop(), Now: func() time.Time { return f.now },
		Artifacts: &ArtifactOptions{Runs: runArtifacts{artRun: {key}}, Store: l, Links: f.signer}})
	srv := httptest.NewServer(s)
	defer srv.Close()
	res, _ := get(t, http.MethodGet, srv.URL+"/artifacts/"+artRun+"/"+key+"?"+f.signer.Sign(artRun, key, f.now.Add(time.Hour)).Encode(), "identity")
	if res.StatusCode != 200 || res.Header.Get("Content-Disposition") != `attachment; filename=page.html` {
		t.Fatalf("%d, Content-Disposition %q", res.StatusCode, res.Header.Get("Content-Disposition"))
	}
}

// TestArtifactRefusals: a bad token is 403 with why (never the key or the
// secret), no token is the API's 401, a key the run did not record is 404
// whoever asks.
func TestArtifactRefusals(t *testing.T) {
	auth := config.Auth{BearerToken: "api-token-canary"}
	f := newArtifactServer(t, newLocal(t), false, auth)
	good := f.signer.Sign(artRun, artKey, f.now.Add(time.Hour))
	base := f.srv.URL + "/artifacts/" + artRun + "/" + artKey
	tampered := url.Values{links.ParamExpires: {fmt.Sprint(f.now.Add(48 * time.Hour).Unix())}, links.ParamSignature: good[links.ParamSignature]}
	cases := []struct {
		name, url, bearer string
		code              int
		reason            string
	}{
		{"expired", f.link(artRun, artKey, -time.Minute), "", 403, "expired"},
		{"exp moved", base + "?" + tampered.Encode(), "", 403, "signature does not match"},
		{"token of another key", f.srv.URL + "/artifacts/" + artRun + "/" + chartKey + "?" + good.Encode(), "", 403, "signature does not match"},
		{"token of another run", f.srv.URL + "/artifacts/0198-run-b/" + artKey + "?" + good.Encode(), "", 403, "signature does not match"},
		{"malformed", base + "?sig=%%%&exp=1", "", 403, "malformed"},
		{"a bad token with API credentials is still 403", f.link(artRun, artKey, -time.Minute), "api-token-canary", 403, "expired"},
		{"no token", base, "", 401, "missing or wrong credentials"},
		{"wrong API token", base, "nope", 401, "missing or wrong credentials"},
		{"API token", base, "api-token-canary", 200, ""},
		{"a valid token for a key the run did not record", f.link(artRun, otherKey, time.Hour), "", 404, "no such artifact"},
		{"API token, another run's key", f.srv.URL + "/artifacts/" + artRun + "/" + otherKey, "api-token-canary", 404, "no such artifact"},
		{"API token, unknown run", f.srv.URL + "/artifacts/nope/" + artKey, "api-token-canary", 404, "no such artifact"},
		{"API token, key escaping", f.srv.URL + "/artifacts/" + artRun + "/a/%2E%2E/b", "api-token-canary", 404, "no such artifact"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hdr []string
			if c.bearer != "" {
				hdr = []string{"Authorization", "Bearer " + c.bearer}
			}
			res, body := get(t, http.MethodGet, c.url, "identity", hdr...)
			if res.StatusCode != c.code || !strings.Contains(string(body), c.reason) {
				t.Fatalf("%d %s, want %d with %q", res.StatusCode, body, c.code, c.reason)
			}
			if c.code != 200 && (strings.Contains(string(body), "prometheus.json") || strings.Contains(string(body), "canary") ||
				strings.Contains(string(body), "artifact-test-key")) {
				t.Fatalf("the refusal carries the key or a secret: %s", body)
			}
		})
	}
}

// TestArtifactLinkRedirectsToAFreshPresignedURL: against a real S3 server
// (versitygw), each click is a 302 to a presigned URL made then, never
// cached, and following it gives the exact bytes put.
func TestArtifactLinkRedirectsToAFreshPresignedURL(t *testing.T) {
	srv := testenv.StartVersityGW(t)
	ctx := context.Background()
	s3, err := storage.NewS3(ctx, storage.S3Options{Bucket: srv.Bucket, Prefix: "links", Region: srv.Region, Endpoint: srv.Endpoint,
		PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey, LinkExpiry: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f := newArtifactServer(t, s3, true, config.Auth{})
	u := f.link(artRun, artKey, 30*24*time.Hour)
	res, _ := get(t, http.MethodGet, u, "")
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusFound || res.Header.Get("Cache-Control") != "no-store" || !strings.HasPrefix(loc, srv.Endpoint) {
		t.Fatalf("%d, Cache-Control %q, Location %q", res.StatusCode, res.Header.Get("Cache-Control"), loc)
	}
	if strings.Contains(loc, srv.SecretAccessKey) {
		t.Fatal("the redirect carries the S3 secret key")
	}
	f.now = f.now.Add(10 * 24 * time.Hour) // past any presigned URL's 7 days, within the link's 30
	res2, _ := get(t, http.MethodGet, u, "")
	if res2.StatusCode != http.StatusFound {
		t.Fatalf("second click: %d", res2.StatusCode)
	}
	// Follow the redirect as a browser that takes gzip would, and as one that does not.
	for _, auto := range []bool{true, false} {
		tr := &http.Transport{DisableCompression: !auto}
		res, err := (&http.Client{Transport: tr}).Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		tr.CloseIdleConnections()
		if !auto && res.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(zr)
		}
		if res.StatusCode != 200 || sha(body) != sha(f.text) {
			t.Fatalf("followed (transport gzip %v): %d, %d bytes, want the %d put", auto, res.StatusCode, len(body), len(f.text))
		}
	}
	// A refused token is refused before any redirect.
	res3, _ := get(t, http.MethodGet, f.link(artRun, artKey, -time.Second), "")
	if res3.StatusCode != 403 || res3.Header.Get("Location") != "" {
		t.Fatalf("expired: %d, Location %q", res3.StatusCode, res3.Header.Get("Location"))
	}
}
