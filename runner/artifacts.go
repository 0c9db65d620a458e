package runner

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// ThreadLinks says how a thread links a step's artifacts (Options.Links).
type ThreadLinks struct {
	// Mode is config.LinksRoute ("" too) or config.LinksPresigned.
	Mode string
	// BaseURL is where the daemon's /artifacts route is reached (web.external_url,
	// or the listen address when that is one a reader can open); empty in
	// route mode: no artifact links.
	BaseURL string
	// TTL is a route link's lifetime (web.link_ttl); 0: config.DefaultLinkTTL.
	TTL time.Duration
	// Secret signs route links (web.link_secret); empty: the key kept in the
	// database (linkKey), the same for every replica.
	Secret []byte
}

// linkKeyName names the link-signing key in autocapture_keys.
const linkKeyName = "link-signing"

// openSigner builds the link signer from the configured secret, else from the
// key in the database (a step of the start, retried while PostgreSQL is away:
// linkKey is idempotent).
func (s *Service) openSigner(ctx context.Context) (*links.Signer, error) {
	key := s.o.Links.Secret
	if len(key) == 0 {
		err := s.startup.do(ctx, "link key", func(ctx context.Context) error {
			var err error
			key, err = s.linkKey(ctx)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return links.NewSigner(key)
}

// linkKey returns the link-signing key kept in the database, generating 32
// random bytes the first time. Replicas starting together race safely: each
// offers its own key with ON CONFLICT DO NOTHING, exactly one insert wins,
// and every replica then reads the winner. The key never leaves the database
// and this process (no log line, no error carries it).
func (s *Service) linkKey(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("runner: link key: %w", err)
	}
	if err := s.tables.Keys.Offer(ctx, s.db, linkKeyName, base64.StdEncoding.EncodeToString(fresh)); err != nil {
		return nil, fmt.Errorf("runner: link key: store: %w", err)
	}
	v, err := s.tables.Keys.Get(ctx, s.db, linkKeyName)
	if err != nil {
		return nil, fmt.Errorf("runner: link key: read: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(key) < links.MinKeyBytes {
		return nil, fmt.Errorf("runner: link key: the stored %s key is not %d+ bytes of base64; delete its autocapture_keys row to make a new one (links made with it stop working)",
			linkKeyName, links.MinKeyBytes)
	}
	return key, nil
}

// keeperRuns answers what the artifacts' Keeper needs of the run lifecycle
// (artifacts.Runs).
type keeperRuns struct{ s *Service }

// UploadsDone records the thread's reply that the run's spooled artifacts
// are all uploaded and, when the run is finished, asks for its manifest to
// be rewritten: the manifest, written while uploads were pending (they say
// "pending" there), is rewritten once tx commits. A run still running gets
// its manifest at the finish anyway.
func (r keeperRuns) UploadsDone(ctx context.Context, tx *sql.Tx, runID string, n int) error {
	s := r.s
	if err := s.out.Append(ctx, tx, runID, outbox.UploadsDone{N: n}); err != nil {
		return err
	}
	finishedAt, err := s.tables.Runs.FinishedAt(ctx, tx, runID)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil // deleted by retention meanwhile
		}
		return fmt.Errorf("runner: uploads of %s: %w", runID, err)
	}
	if !finishedAt.Valid {
		return nil
	}
	return s.art.EnqueueManifestTx(ctx, tx, runID)
}

// ManifestOf is what run runID's manifest says of it (see
// artifacts.Runs): its row, its plans rebuilt, its records and verdicts.
func (r keeperRuns) ManifestOf(ctx context.Context, runID string) (artifacts.ManifestInput, bool, error) {
	s := r.s
	row, err := s.getRow(ctx, s.db, runID)
	if errors.Is(err, runs.ErrNotFound) {
		return artifacts.ManifestInput{}, false, nil
	} else if err != nil {
		return artifacts.ManifestInput{}, false, err
	}
	if !finished(row.Status) {
		return artifacts.ManifestInput{}, false, nil // asked for by a finish that was not committed as such
	}
	if len(row.plans) == 0 {
		return artifacts.ManifestInput{}, false, nil // skipped before any playbook ran: nothing was captured
	}
	steps, err := s.loadSteps(ctx, s.db, runID)
	if err != nil {
		return artifacts.ManifestInput{}, false, err
	}
	verdicts, err := s.loadVerdicts(ctx, s.db, runID)
	if err != nil {
		return artifacts.ManifestInput{}, false, err
	}
	in := s.manifestInput(row, steps)
	in.Verdicts = verdicts
	return in, true, nil
}

// manifestInput is what the manifest says of r with its step records recs:
// its plans rebuilt from their stored source (for the rendered configs).
func (s *Service) manifestInput(r *runRow, recs []executor.StepRecord) artifacts.ManifestInput {
	in := artifacts.ManifestInput{Alertname: r.Alertname, Verdict: r.Verdict, Records: recs,
		Run: artifacts.ManifestRun{ID: r.ID, Key: r.Key, Status: r.Status, Reason: r.Reason, CreatedAt: r.CreatedAt,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, ResolvedAt: r.ResolvedAt, Attempts: r.Attempts, Resumed: r.Resumed},
		Alert: artifacts.ManifestAlert{Fingerprint: r.Fingerprint, StartsAt: r.StartsAt, GeneratorURL: r.alert.GeneratorURL,
			Labels: r.Labels, Annotations: r.Annotations}}
	if r.window != nil {
		in.Run.WindowStart, in.Run.WindowEnd = &r.window.Start, &r.window.End
	}
	for _, sp := range r.plans {
		in.Plans = append(in.Plans, artifacts.ManifestPlan{Stored: sp, Planned: s.rebuiltSteps(r, sp)})
	}
	return in
}

// rebuiltSteps are the plan's steps with their rendered configs, rebuilt from
// the stored source the run ran; none when it cannot be rebuilt.
func (s *Service) rebuiltSteps(r *runRow, sp playbooks.StoredPlan) []playbooks.PlannedStep {
	w := vocab.Window{}
	if r.window != nil {
		w = *r.window
	}
	p, err := s.o.Planner.Rebuild(sp, r.alert, w)
	if err != nil {
		s.log.Warn("Manifest: a run's plan cannot be rebuilt; its steps are listed without config.",
			zap.String("run", r.ID), zap.String("playbook", sp.Playbook), zap.Error(err))
		return nil
	}
	return p.Steps
}

// Signer is the link signer the /artifacts route verifies tokens with.
func (s *Service) Signer() *links.Signer { return s.signer }

// RunArtifact says whether key is one of run runID's artifacts: recorded by
// one of its steps, or its manifest. An unknown run is runs.ErrNotFound; the
// artifact route answers 404 for either, so no other key can be probed.
func (s *Service) RunArtifact(ctx context.Context, runID, key string) (bool, error) {
	r, err := s.getRow(ctx, s.db, runID)
	if err != nil {
		return false, err
	}
	if key == storage.ManifestKey(r.CreatedAt, r.Alertname, r.ID) {
		return true, nil
	}
	steps, err := s.loadSteps(ctx, s.db, runID)
	if err != nil {
		return false, err
	}
	for _, st := range steps {
		for _, a := range st.Artifacts {
			if a.Key == key {
				return true, nil
			}
		}
	}
	return false, nil
}

// artifactLink is the thread's link to one artifact, or false for none:
// route mode links the daemon's /artifacts route with a token signed for
// exactly this run and key (a click on S3 is redirected to a presigned URL
// made then, so the link outlives a presigned URL's 7 days); presigned mode
// uses the store's own link, its lifetime said in the text.
func (s *Service) artifactLink(ctx context.Context, runID string, a vocab.Artifact) (notify.Link, bool) {
	l := s.o.Links
	if l.Mode == config.LinksPresigned {
		env := s.o.Env
		if env == nil || env.Store == nil {
			return notify.Link{}, false
		}
		u, valid, err := env.Store.Link(ctx, a.Key)
		if err != nil {
			s.log.Warn("No link to an artifact.", zap.String("run", runID), zap.String("key", a.Key), zap.Error(err))
			return notify.Link{}, false
		}
		return notify.Link{Name: a.Name, URL: u, Valid: valid}, true
	}
	if l.BaseURL == "" || s.signer == nil {
		return notify.Link{}, false
	}
	ttl := l.TTL
	if ttl <= 0 {
		ttl = config.DefaultLinkTTL
	}
	q := s.signer.Sign(runID, a.Key, s.now().Add(ttl))
	return notify.Link{Name: a.Name, URL: ArtifactURL(l.BaseURL, runID, a.Key) + "?" + q.Encode()}, true
}

// ArtifactURL is the /artifacts route's address of key of run runID under
// base, each segment escaped.
func ArtifactURL(base, runID, key string) string {
	segs := strings.Split(key, "/")
	for i, p := range segs {
		segs[i] = url.PathEscape(p)
	}
	return strings.TrimRight(base, "/") + "/artifacts/" + url.PathEscape(runID) + "/" + strings.Join(segs, "/")
}
