package artifacts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// openSigner opens h's link signer as the runner's start does (no retries).
func (h *harness) openSigner(ctx context.Context) error {
	return h.k.OpenSigner(ctx, func(ctx context.Context, _ string, f func(context.Context) error) error { return f(ctx) })
}

// TestLinkKeySharedByReplicas: replicas opening their signers at the same
// time on one database agree on one generated link key (a link one signs,
// the other verifies), kept in one row; a configured secret is used instead.
func TestLinkKeySharedByReplicas(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		hs := make([]*harness, 3)
		for i := range hs {
			hs[i] = newHarness(t, db, nil, false) // migrations one at a time, as replicas' take turns
		}
		errs := make([]error, len(hs))
		var wg sync.WaitGroup
		for i, h := range hs {
			wg.Go(func() { errs[i] = h.openSigner(context.Background()) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("signer %d: %v", i, err)
			}
		}
		exp := time.Now().Add(time.Hour)
		q := hs[0].k.Signer().Sign("run-1", "a/b.json", exp)
		for i, h := range hs[1:] {
			if err := h.k.Signer().Verify("run-1", "a/b.json", q, time.Now()); err != nil {
				t.Fatalf("replica %d does not verify replica 0's link: %v", i+1, err)
			}
		}
		var n int
		if err := hs[0].db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM autocapture_keys`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d key rows (%v), want 1", n, err)
		}
		secret := []byte("configured-link-secret-0123456789")
		h := newHarness(t, db, nil, false, func(d *Deps) { d.Links.Secret = secret })
		if err := h.openSigner(context.Background()); err != nil {
			t.Fatal(err)
		}
		mine, _ := links.NewSigner(secret)
		if err := h.k.Signer().Verify("run-1", "a/b.json", mine.Sign("run-1", "a/b.json", exp), time.Now()); err != nil {
			t.Fatalf("the configured secret is not the one used: %v", err)
		}
		if err := h.k.Signer().Verify("run-1", "a/b.json", q, time.Now()); !errors.Is(err, links.ErrBadSignature) {
			t.Fatalf("with a configured secret, the database key's link verified: %v", err)
		}
	})
}

// TestBadStoredLinkKeyIsRefused: a link key in the database that is not
// 32+ bytes of base64 stops the start with what to do, and never says the
// key.
func TestBadStoredLinkKeyIsRefused(t *testing.T) {
	h := newHarness(t, testenv.DB{Path: filepath.Join(t.TempDir(), "autocapture.db")}, nil, false)
	if _, err := h.db.ExecContext(context.Background(), `INSERT INTO autocapture_keys (name, value) VALUES ($1, 'c2hvcnQ=')`,
		linkKeyName); err != nil {
		t.Fatal(err)
	}
	err := h.openSigner(context.Background())
	if err == nil || !strings.Contains(err.Error(), "delete its autocapture_keys row") || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Fatalf("a short stored key: %v", err)
	}
	if h.k.Signer() != nil {
		t.Error("a signer was built from a bad key")
	}
}

// TestRouteLinkIsSignedForItsRunAndKey: in route mode a thread's link is
// the daemon's /artifacts route of exactly this run and key, each segment
// escaped, with a token that verifies for them alone and expires after the
// TTL; without a base URL there is no link.
func TestRouteLinkIsSignedForItsRunAndKey(t *testing.T) {
	db := testenv.DB{Path: filepath.Join(t.TempDir(), "autocapture.db")}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := newHarness(t, db, newLocalStore(t), false, func(d *Deps) {
		d.Links = ThreadLinks{BaseURL: "http://autocapture.example:8080/", TTL: time.Hour}
		d.Now = func() time.Time { return now }
	})
	ctx := context.Background()
	a := vocab.Artifact{Name: "out put.txt", Key: "2026/01/02/VLLMSlowTTFT/run 1/pb/grab/out put.txt"}
	if _, ok := h.k.Link(ctx, "run 1", a); ok {
		t.Fatal("a link before the signer is open")
	}
	if err := h.openSigner(ctx); err != nil {
		t.Fatal(err)
	}
	l, ok := h.k.Link(ctx, "run 1", a)
	base, query, _ := strings.Cut(l.URL, "?")
	if want := "http://autocapture.example:8080/artifacts/run%201/2026/01/02/VLLMSlowTTFT/run%201/pb/grab/out%20put.txt"; !ok ||
		base != want || l.Name != a.Name {
		t.Fatalf("link %+v (%v), want %s", l, ok, want)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.k.Signer().Verify("run 1", a.Key, q, now.Add(59*time.Minute)); err != nil {
		t.Errorf("the link does not verify within its TTL: %v", err)
	}
	if err := h.k.Signer().Verify("run 2", a.Key, q, now); err == nil {
		t.Error("the link verifies for another run")
	}
	if err := h.k.Signer().Verify("run 1", a.Key, q, now.Add(61*time.Minute)); err == nil {
		t.Error("the link verifies after its TTL")
	}

	off := newHarness(t, db, newLocalStore(t), false)
	if err := off.openSigner(ctx); err != nil {
		t.Fatal(err)
	}
	if l, ok := off.k.Link(ctx, "run 1", a); ok {
		t.Errorf("a link %+v without a base URL", l)
	}
}

// TestPresignedThreadLinkSaysItsLifetime: with storage.links: presigned and
// the artifacts in S3 behind the spool (as the daemon wires it), a thread's
// link is the store's presigned URL and says how long it works — the
// store's answer, not a copy of the config (which, read off a *storage.S3
// the spool hid, said nothing) — and the URL gives the exact bytes.
func TestPresignedThreadLinkSaysItsLifetime(t *testing.T) {
	srv := testenv.StartVersityGW(t)
	ctx := context.Background()
	primary, err := storage.NewS3(ctx, storage.S3Options{Bucket: srv.Bucket, Endpoint: srv.Endpoint,
		PathStyle: true, Region: srv.Region, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey,
		Compression: storage.CompressionNone, LinkExpiry: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	spool, err := storage.NewSpool(primary, filepath.Join(t.TempDir(), "spool"), storage.CompressionNone)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testenv.DB{Path: filepath.Join(t.TempDir(), "autocapture.db")}, spool, false,
		func(d *Deps) { d.Links = ThreadLinks{Mode: config.LinksPresigned} })
	body := []byte(`{"queue":42}`)
	obj, err := spool.Put(ctx, "2026/01/02/VLLMSlowTTFT/run-1/pb/snapshot/prometheus.json", bytes.NewReader(body), vocab.ObjectMeta{})
	if err != nil {
		t.Fatal(err)
	}
	link, ok := h.k.Link(ctx, "run-1", vocab.Artifact{Name: "prometheus.json", Key: obj.Key})
	if !ok || link.Valid != 2*time.Hour || !strings.HasPrefix(link.URL, srv.Endpoint+"/") || link.Text() != "prometheus.json (link valid 2h)" {
		t.Fatalf("link %+v (%q), want the store's presigned URL valid 2h", link, link.Text())
	}
	res, err := http.Get(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Equal(got, body) {
		t.Fatalf("GET the presigned link: %d %q", res.StatusCode, got)
	}
}

// TestPresignedLinkIsTheStores: presigned mode links what the store links
// (a Local store: its file), and without an artifact store gives no link
// rather than a broken one.
func TestPresignedLinkIsTheStores(t *testing.T) {
	db := testenv.DB{Path: filepath.Join(t.TempDir(), "autocapture.db")}
	presigned := func(d *Deps) { d.Links = ThreadLinks{Mode: config.LinksPresigned} }
	a := vocab.Artifact{Name: "x.json", Key: "2026/01/02/VLLMSlowTTFT/run-1/pb/s/x.json"}
	if l, ok := newHarness(t, db, nil, false, presigned).k.Link(context.Background(), "run-1", a); ok {
		t.Errorf("no store, link %+v", l)
	}
	l, ok := newHarness(t, db, newLocalStore(t), false, presigned).k.Link(context.Background(), "run-1", a)
	if !ok || !strings.HasPrefix(l.URL, "file://") || !strings.HasSuffix(l.URL, "/run-1/pb/s/x.json") || l.Name != "x.json" {
		t.Errorf("a Local store's link %+v (%v), want its file", l, ok)
	}
}
