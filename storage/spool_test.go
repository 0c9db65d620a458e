package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// newSpoolFor wraps an instrumented S3 store of srv in a spool under a
// temporary folder; it records what the OnSpool hook is given.
func newSpoolFor(t *testing.T, o S3Options) (*Spool, *Metrics, *spooledLog) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sp, err := NewSpool(m.Instrument(newS3(t, o), "s3"), filepath.Join(t.TempDir(), "spool"), o.Compression)
	if err != nil {
		t.Fatal(err)
	}
	log := &spooledLog{}
	sp.OnSpool(log.add)
	return sp, m, log
}

type spooledLog struct {
	mu   sync.Mutex
	objs []vocab.Object
}

func (l *spooledLog) add(_ context.Context, obj vocab.Object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.objs = append(l.objs, obj)
}

func (l *spooledLog) all() []vocab.Object {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]vocab.Object(nil), l.objs...)
}

func spoolKeys(t *testing.T, sp *Spool) []string {
	t.Helper()
	var keys []string
	if err := sp.Spooled(context.Background(), func(o vocab.Object, _ time.Time) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// onlyReader hides every interface but Read: the Put cannot rewind it.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestSpoolKeepsWhatAnOutageWouldLose stops the S3 server (the process this
// test started, by its pid), puts an artifact, which lands in the spool
// pending with the key and hashes a direct upload records, restarts the
// server on the same port and uploads it: the stored object is byte for byte
// what a direct Put stores, and the spool is empty.
func TestSpoolKeepsWhatAnOutageWouldLose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, srv := range s3Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			o := s3Options(srv)
			sp, m, log := newSpoolFor(t, o)
			sp.DownFor = -1 // every Put tries the primary: the test sees each failure
			text := spanJSON(1 << 20)
			direct, err := sp.Put(ctx, "run/direct/traces.json", onlyReader{bytes.NewReader(text)}, vocab.ObjectMeta{})
			if err != nil || direct.Pending || direct.ContentEncoding != "gzip" {
				t.Fatalf("Put with the store up = %+v, %v; want a gzip object, not pending", direct, err)
			}
			if keys := spoolKeys(t, sp); len(keys) != 0 {
				t.Fatalf("a direct upload left %v in the spool", keys)
			}

			srv.Proc.Stop()
			key := "run/spooled/traces.json"
			pending, err := sp.Put(ctx, key, onlyReader{bytes.NewReader(text)}, vocab.ObjectMeta{})
			if err != nil || !pending.Pending {
				t.Fatalf("Put with the store down = %+v, %v; want a pending object", pending, err)
			}
			want := direct
			want.Key, want.Pending = key, true
			if pending != want {
				t.Errorf("pending object %+v\nwant what the direct upload recorded: %+v", pending, want)
			}
			if got := log.all(); len(got) != 1 || got[0] != pending {
				t.Errorf("OnSpool got %+v, want the pending object once", got)
			}
			if got := testutil.ToFloat64(m.failures.WithLabelValues("s3", ReasonUnavailable)); got != 1 {
				t.Errorf("upload failures{reason=unavailable} = %v, want 1", got)
			}
			if got := openAll(t, sp, key); !bytes.Equal(got, text) {
				t.Errorf("Open of a spooled key while down gave %d bytes, want the %d put", len(got), len(text))
			}
			if _, err := sp.Upload(ctx, key); !Unavailable(err) {
				t.Errorf("Upload while down = %v, want an unavailable error", err)
			}

			srv.Restart(t)
			up, err := sp.Upload(ctx, key)
			want.Pending = false
			if err != nil || up != want {
				t.Fatalf("Upload after the outage = %+v, %v; want %+v", up, err, want)
			}
			if keys := spoolKeys(t, sp); len(keys) != 0 {
				t.Errorf("spool after the upload: %v, want empty", keys)
			}
			st, err := newS3(t, o).Stat(ctx, key)
			if err != nil || st != up {
				t.Errorf("the bucket's object: %+v, %v; want %+v", st, err, up)
			}
			h, err := srv.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(o.Prefix + "/" + key)})
			if err != nil || aws.ToString(h.ContentEncoding) != "gzip" || aws.ToString(h.ContentType) != "application/json" {
				t.Errorf("head: %v %v; want Content-Encoding gzip, Content-Type application/json as a direct upload", h, err)
			}
			if got := openAll(t, newS3(t, o), key); !bytes.Equal(got, text) {
				t.Error("the uploaded object does not read back as the bytes put")
			}
			if got := testutil.ToFloat64(m.objects.WithLabelValues("s3")); got != 2 {
				t.Errorf("uploaded objects = %v, want 2 (the direct and the late upload)", got)
			}
			if got := testutil.ToFloat64(m.bytes.WithLabelValues("s3")); got != float64(2*direct.Size) {
				t.Errorf("uploaded bytes = %v, want %d", got, 2*direct.Size)
			}

			t.Run("uploaded, spool file not deleted: the re-upload is an idempotent success", func(t *testing.T) {
				if _, err := sp.local.Put(ctx, key, bytes.NewReader(text), vocab.ObjectMeta{}); err != nil {
					t.Fatal(err)
				}
				again, err := sp.Upload(ctx, key)
				if err != nil || again != up {
					t.Errorf("re-upload = %+v, %v; want %+v", again, err, up)
				}
				if sp.Has(ctx, key) {
					t.Error("the spool file is still there")
				}
			})
			t.Run("no longer spooled: success when the store holds it", func(t *testing.T) {
				if got, err := sp.Upload(ctx, key); err != nil || got != up {
					t.Errorf("Upload of an uploaded key = %+v, %v", got, err)
				}
				if _, err := sp.Upload(ctx, "run/never/put.json"); !errors.Is(err, ErrNotFound) {
					t.Errorf("Upload of a key neither spooled nor stored = %v, want ErrNotFound", err)
				}
			})
			t.Run("the key holds other content: a conflict, never an overwrite", func(t *testing.T) {
				if _, err := sp.local.Put(ctx, key, bytes.NewReader(spanJSON(1000)), vocab.ObjectMeta{}); err != nil {
					t.Fatal(err)
				}
				if _, err := sp.Upload(ctx, key); !errors.Is(err, ErrConflict) {
					t.Errorf("Upload over other content = %v, want ErrConflict", err)
				}
				if got := openAll(t, newS3(t, o), key); !bytes.Equal(got, text) {
					t.Error("the stored object changed")
				}
			})
		})
	}
}

// TestSpoolRefusesAConfigError: wrong credentials are not an outage: the Put
// fails at once naming bucket and endpoint, nothing stays in the spool, and
// the failure counts as denied.
func TestSpoolRefusesAConfigError(t *testing.T) {
	srv := testenv.StartVersityGW(t)
	o := s3Options(srv)
	o.SecretAccessKey = "wrong-" + o.SecretAccessKey[6:]
	sp, m, log := newSpoolFor(t, o)
	_, err := sp.Put(context.Background(), "run/denied/x.json", strings.NewReader(`{"a":1}`), vocab.ObjectMeta{})
	if !errors.Is(err, vocab.ErrStoreAccessDenied) || !strings.Contains(err.Error(), fmt.Sprintf("s3 bucket %s at %s", srv.Bucket, srv.Endpoint)) {
		t.Errorf("Put with a wrong secret = %v; want access denied naming bucket and endpoint", err)
	}
	if keys := spoolKeys(t, sp); len(keys) != 0 || len(log.all()) != 0 {
		t.Errorf("spooled %v (hook %v): a config error must not be spooled", keys, log.all())
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("s3", ReasonDenied)); got != 1 {
		t.Errorf("upload failures{reason=denied} = %v, want 1", got)
	}
}

// TestPutStoredRefusesBytesThatAreNotTheRecordedOnes: a spool file that
// changed on disk is not uploaded under the recorded hashes.
func TestPutStoredRefusesBytesThatAreNotTheRecordedOnes(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartVersityGW(t)
	s := newS3(t, s3Options(srv))
	body := randomBytes(1 << 10)
	obj := vocab.Object{Key: "run/x/blob.bin", Size: int64(len(body)), SHA256: sum(body), ContentType: "application/octet-stream"}
	bad := append([]byte{}, body...)
	bad[10] ^= 1
	if _, err := s.PutStored(ctx, obj, bytes.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "not the 1024 bytes") {
		t.Errorf("PutStored of altered bytes = %v, want a hash mismatch", err)
	}
	if _, err := s.Stat(ctx, obj.Key); !errors.Is(err, ErrNotFound) {
		t.Errorf("after a refused PutStored, Stat = %v; want ErrNotFound (nothing stored)", err)
	}
	if got, err := s.PutStored(ctx, obj, bytes.NewReader(body)); err != nil || got != obj {
		t.Errorf("PutStored of the right bytes = %+v, %v", got, err)
	}
}

// fakePrimary fails every PutStored with err.
type fakePrimary struct {
	StoredPutter
	err   error
	calls int
}

func (f *fakePrimary) PutStored(context.Context, vocab.Object, io.Reader) (vocab.Object, error) {
	f.calls++
	return vocab.Object{}, f.err
}

// TestSpoolSpoolsOnlyOutages: which upload errors keep the bytes (an outage)
// and which are the Put's error with nothing left in the spool.
func TestSpoolSpoolsOnlyOutages(t *testing.T) {
	status := func(code int) error {
		return &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("x")}
	}
	cases := []struct {
		name   string
		err    error
		cancel bool
		spool  bool
	}{
		{"503", status(503), false, true},
		{"500", status(500), false, true},
		{"429", status(429), false, true},
		{"unreachable", fmt.Errorf("put: %w", &classifiedError{vocab.ErrStoreUnreachable, errors.New("dial tcp: connection refused")}), false, true},
		{"timeout", fmt.Errorf("put: %w", context.DeadlineExceeded), false, true},
		{"conflict", fmt.Errorf("%w: k", ErrConflict), false, false},
		{"denied", &classifiedError{vocab.ErrStoreAccessDenied, status(403)}, false, false},
		{"bad request", &classifiedError{vocab.ErrStoreBadRequest, status(400)}, false, false},
		{"no bucket", &classifiedError{vocab.ErrStoreNoBucket, status(404)}, false, false},
		{"cancelled", context.Canceled, true, false},
		{"down, but the caller's context ended", status(503), true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp, err := NewSpool(&fakePrimary{err: c.err}, t.TempDir(), CompressionGzip)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancel {
				sp.primary = &cancelling{fakePrimary{err: c.err}, cancel}
			}
			obj, err := sp.Put(ctx, "a/b.json", strings.NewReader(`{"x":1}`), vocab.ObjectMeta{})
			if got := err == nil && obj.Pending; got != c.spool {
				t.Errorf("Put = %+v, %v; spooled %v, want %v", obj, err, got, c.spool)
			}
			if n := len(spoolKeys(t, sp)); n != map[bool]int{true: 1, false: 0}[c.spool] {
				t.Errorf("%d files in the spool", n)
			}
		})
	}
	t.Run("moments after an outage, Put spools without waiting for the store", func(t *testing.T) {
		f := &fakePrimary{err: status(503)}
		sp, _ := NewSpool(f, t.TempDir(), CompressionGzip)
		for _, k := range []string{"a/1.json", "a/2.json"} {
			if obj, err := sp.Put(context.Background(), k, strings.NewReader(`{}`), vocab.ObjectMeta{}); err != nil || !obj.Pending {
				t.Fatalf("Put %s = %+v, %v", k, obj, err)
			}
		}
		if f.calls != 1 {
			t.Errorf("the store was tried %d times, want once (DownFor)", f.calls)
		}
	})
	t.Run("a re-put of a pending key that fails otherwise keeps the spooled file", func(t *testing.T) {
		f := &fakePrimary{err: status(503)}
		sp, _ := NewSpool(f, t.TempDir(), CompressionGzip)
		sp.DownFor = -1
		if _, err := sp.Put(context.Background(), "a/1.json", strings.NewReader(`{}`), vocab.ObjectMeta{}); err != nil {
			t.Fatal(err)
		}
		f.err = &classifiedError{vocab.ErrStoreAccessDenied, status(403)}
		if _, err := sp.Put(context.Background(), "a/1.json", strings.NewReader(`{}`), vocab.ObjectMeta{}); err == nil {
			t.Fatal("Put passed")
		}
		if !sp.Has(context.Background(), "a/1.json") {
			t.Error("the earlier pending file was removed")
		}
	})
}

// cancelling ends the caller's context during the upload, then fails.
type cancelling struct {
	fakePrimary
	cancel func()
}

func (c *cancelling) PutStored(ctx context.Context, o vocab.Object, r io.Reader) (vocab.Object, error) {
	c.cancel()
	return c.fakePrimary.PutStored(ctx, o, r)
}

// TestSpoolGauges reads the backlog gauges from a registry.
func TestSpoolGauges(t *testing.T) {
	sp, err := NewSpool(&fakePrimary{err: context.DeadlineExceeded}, t.TempDir(), CompressionNone)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := RegisterSpool(reg, sp); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a/1.bin", "a/2.bin"} {
		if _, err := sp.Put(context.Background(), k, bytes.NewReader(make([]byte, 100)), vocab.ObjectMeta{}); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(sp.Dir(), "a", "1.bin"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP autocapture_spool_bytes Stored bytes of the artifacts in this replica's local spool.
# TYPE autocapture_spool_bytes gauge
autocapture_spool_bytes 200
# HELP autocapture_spool_files Artifacts kept in this replica's local spool, waiting for their upload.
# TYPE autocapture_spool_files gauge
autocapture_spool_files 2
`), "autocapture_spool_files", "autocapture_spool_bytes"); err != nil {
		t.Error(err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "autocapture_spool_oldest_age_seconds" {
			if age := mf.GetMetric()[0].GetGauge().GetValue(); age < 3500 || age > 3700 {
				t.Errorf("oldest age %v s, want about 3600", age)
			}
		}
	}
}
