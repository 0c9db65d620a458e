package storage

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// TestS3PutMemoryIsBounded puts a 100 MiB generated stream through
// bench/s3put, a separate process built without -race, and reads its peak
// RSS: holding the stream whole would take more than 100 MiB, streaming in
// 5 MiB parts × 4 in flight takes about a third of it. The object must be a
// real multipart upload and its bytes must hash to what Put reported.
func TestS3PutMemoryIsBounded(t *testing.T) {
	t.Parallel()
	testPutMemoryIsBounded(t, false)
}

// TestSpoolPutMemoryIsBounded is the same through a Spool: the 100 MiB are
// written to the spool folder, then uploaded from that file (PutStored),
// the path a late upload takes; memory stays as bounded.
func TestSpoolPutMemoryIsBounded(t *testing.T) {
	t.Parallel()
	testPutMemoryIsBounded(t, true)
}

func testPutMemoryIsBounded(t *testing.T, spooled bool) {
	bin := testenv.BuildBinary(t, "./bench/s3put")
	const size = 100 << 20
	const bound = 100 << 10 // KiB
	for _, srv := range s3Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			o := s3Options(srv)
			cmd := exec.Command(bin, "-endpoint", srv.Endpoint, "-bucket", srv.Bucket, "-region", srv.Region,
				"-prefix", o.Prefix, "-key", "big/stream.bin", "-generate", "random", "-size", "104857600",
				"-part-size", "5242880", "-concurrency", "4")
			spoolDir := t.TempDir()
			if spooled {
				cmd.Args = append(cmd.Args, "-spool", spoolDir)
			}
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+srv.SecretAccessKey)
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("s3put: %v", err)
			}
			var r struct {
				BytesIn    int64   `json:"bytes_in"`
				SHA256     string  `json:"sha256"`
				PeakRSSKiB int64   `json:"peak_rss_kib"`
				Seconds    float64 `json:"seconds"`
			}
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("s3put printed %q: %v", out, err)
			}
			t.Logf("%s: 100 MiB in %.2fs, peak RSS %d MiB", srv.Name, r.Seconds, r.PeakRSSKiB>>10)
			if spooled {
				if n, _ := os.ReadDir(filepath.Join(spoolDir, "big")); len(n) != 0 {
					t.Errorf("the spool still holds %v after the upload", n)
				}
			}
			if r.BytesIn != size {
				t.Fatalf("s3put read %d bytes, want %d", r.BytesIn, size)
			}
			if r.PeakRSSKiB == 0 || r.PeakRSSKiB > bound {
				t.Errorf("peak RSS %d KiB for a %d MiB stream, want ≤ %d KiB", r.PeakRSSKiB, size>>20, bound)
			}
			h, err := srv.Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(o.Prefix + "/big/stream.bin")})
			if err != nil {
				t.Fatal(err)
			}
			if etag := aws.ToString(h.ETag); !strings.Contains(etag, "-") || aws.ToInt64(h.ContentLength) != size {
				t.Errorf("ETag %s, length %d: want a multipart upload of %d bytes", etag, aws.ToInt64(h.ContentLength), size)
			}
			st := newS3(t, o)
			rc, obj, err := st.OpenStored(context.Background(), "big/stream.bin")
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			c := newCounter()
			if _, err := io.Copy(c, rc); err != nil {
				t.Fatal(err)
			}
			if obj.SHA256 != r.SHA256 || c.sum() != r.SHA256 || c.n != size {
				t.Errorf("recorded sha256 %s, stored bytes %s (%d), s3put reported %s", obj.SHA256, c.sum(), c.n, r.SHA256)
			}
		})
	}
}
