package handlers

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// Artifacts is what GET /artifacts/{run}/{key...} needs: which keys belong to a run
// (*runner.Service), and the store they are in.
type Artifacts interface {
	// RunArtifact says whether key is one of run's artifacts (recorded by one
	// of its steps, or its manifest); an unknown run wraps runs.ErrNotFound.
	RunArtifact(ctx context.Context, runID, key string) (bool, error)
}

// ArtifactStore is the part of vocab.Store the route reads through.
type ArtifactStore interface {
	Link(ctx context.Context, key string) (string, time.Duration, error)
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	OpenStored(ctx context.Context, key string) (io.ReadCloser, vocab.Object, error)
}

// LinkVerifier checks a link token for exactly one run and key (*links.Signer).
type LinkVerifier interface {
	Verify(runID, key string, q url.Values, now time.Time) error
}

var _ LinkVerifier = (*links.Signer)(nil)

// ArtifactOptions turn on the /artifacts route (Options.Artifacts).
type ArtifactOptions struct {
	Runs  Artifacts
	Store ArtifactStore
	// Links verifies the tokens in thread links.
	Links LinkVerifier
	// Redirect answers with a 302 to a presigned URL made for each request
	// (S3) instead of streaming the bytes through the daemon (Local).
	Redirect bool
}

// artifact serves GET and HEAD /artifacts/{run}/{key...}.
//
// Who may: a request carrying a link token (sig) must carry a valid one for
// exactly this run and key (403 with why otherwise: expired or not matching;
// counted in autocapture_link_refusals_total{route="artifact"}); one without
// a token is held to the pages' sign-in (401): web.auth or its trusted
// proxy, as the artifacts are what the pages show. Then the key must be
// one the run recorded, else 404, so neither a token nor API credentials
// reach other keys of the store.
func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	a := s.opts.Artifacts
	runID, key := r.PathValue("run"), r.PathValue("key")
	if err := storage.ValidKey(key); err != nil || runID == "" {
		fail(w, http.StatusNotFound, "not_found", "no such artifact")
		return
	}
	// A query that does not parse is taken as a (malformed) token: it must
	// not fall through to the API's auth as if no token had been sent.
	q, qerr := url.ParseQuery(r.URL.RawQuery)
	if q.Has(links.ParamSignature) || qerr != nil {
		if err := a.Links.Verify(runID, key, q, s.opts.Now()); err != nil {
			s.metrics.linkRefusals.WithLabelValues("artifact", linkReason(err)).Inc()
			s.log.Info("Artifact link refused.", zap.String("run", runID), zap.String("remote", clientIP(r)), zap.String("why", err.Error()))
			fail(w, http.StatusForbidden, "forbidden", linkRefusal(err))
			return
		}
	} else if !s.admitReader(w, r) {
		return
	}
	ok, err := a.Runs.RunArtifact(r.Context(), runID, key)
	switch {
	case errors.Is(err, runs.ErrNotFound), err == nil && !ok:
		fail(w, http.StatusNotFound, "not_found", "no such artifact in run "+strconv.Quote(runID))
		return
	case err != nil:
		s.runError(w, r, runID, err)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if a.Redirect {
		s.redirectArtifact(w, r, key)
		return
	}
	s.streamArtifact(w, r, key)
}

// The reasons a link token is refused, as autocapture_link_refusals_total
// counts them.
const (
	reasonExpired      = "expired"
	reasonBadSignature = "bad_signature"
	reasonMalformed    = "malformed"
)

func linkReason(err error) string {
	switch {
	case errors.Is(err, links.ErrExpired):
		return reasonExpired
	case errors.Is(err, links.ErrBadSignature):
		return reasonBadSignature
	}
	return reasonMalformed
}

// linkRefusal is the 403's reason: what is wrong with the token, never the
// key it was checked with.
func linkRefusal(err error) string {
	switch {
	case errors.Is(err, links.ErrExpired):
		return "this link has expired: open the run in the API, or ask for a new link"
	case errors.Is(err, links.ErrBadSignature):
		return "this link's signature does not match this artifact (altered, or made by another deployment)"
	}
	return "this link's token is malformed"
}

// redirectArtifact sends the reader to a presigned URL made now, so a
// thread's link works for web.link_ttl although a presigned URL lasts at most
// 7 days. It is never cached: the next click gets a fresh one.
func (s *Server) redirectArtifact(w http.ResponseWriter, r *http.Request, key string) {
	u, _, err := s.opts.Artifacts.Store.Link(r.Context(), key) // made now: its lifetime is the click's
	if err != nil {
		s.log.Warn("No presigned link for an artifact.", zap.String("key", key), zap.Error(err))
		fail(w, http.StatusBadGateway, "store_unavailable", "the artifact store cannot make a link now")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u, http.StatusFound)
}

// streamArtifact sends the stored bytes: as stored, with their
// Content-Encoding, when the client accepts it; else decoded. The ETag is the
// SHA-256 of the representation sent.
func (s *Server) streamArtifact(w http.ResponseWriter, r *http.Request, key string) {
	st := s.opts.Artifacts.Store
	ctx := r.Context()
	rc, obj, err := st.OpenStored(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		fail(w, http.StatusNotFound, "not_found", "the artifact was recorded but is no longer stored (retention?)")
		return
	}
	if err != nil {
		s.log.Warn("Cannot read an artifact.", zap.String("key", key), zap.Error(err))
		fail(w, http.StatusBadGateway, "store_unavailable", "the artifact store cannot be read now")
		return
	}
	size, sum := obj.Size, obj.SHA256
	h := w.Header()
	if obj.ContentEncoding != "" {
		h.Set("Vary", "Accept-Encoding")
		if accepts(r.Header.Get("Accept-Encoding"), obj.ContentEncoding) {
			h.Set("Content-Encoding", obj.ContentEncoding)
		} else {
			rc.Close()
			if rc, err = st.Open(ctx, key); err != nil {
				s.log.Warn("Cannot read an artifact.", zap.String("key", key), zap.Error(err))
				fail(w, http.StatusBadGateway, "store_unavailable", "the artifact store cannot be read now")
				return
			}
			size, sum = obj.OriginalSize, obj.OriginalSHA256
		}
	}
	defer rc.Close()
	ct := obj.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	if !inline(ct) {
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(key)}))
	}
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'; img-src 'self'")
	if sum != "" {
		etag := `"` + sum + `"`
		h.Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	if size > 0 {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// A large artifact may take longer than the server's write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Info("Artifact download cut short.", zap.String("key", key), zap.Error(err))
	}
}

// inline says whether a browser may render the type in place: images other
// than SVG (which can carry script), plain text and JSON. Everything else is
// a download.
func inline(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch {
	case mt == "image/svg+xml":
		return false
	case strings.HasPrefix(mt, "image/"), mt == "text/plain", mt == "application/json":
		return true
	}
	return false
}

// accepts says whether an Accept-Encoding header takes enc (a q of 0 refuses it).
func accepts(header, enc string) bool {
	star := false
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		switch {
		case strings.EqualFold(strings.TrimSpace(name), enc):
			return q > 0
		case strings.TrimSpace(name) == "*":
			star = q > 0
		}
	}
	return star
}
