package artifacts

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// ThreadLinks says how a thread links a step's artifacts (the runner's
// Options.Links).
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

// OpenSigner builds the link signer from the configured secret, else from the
// key in the database; retry is the runner's start step that retries while
// PostgreSQL is away (linkKey is idempotent).
func (k *Keeper) OpenSigner(ctx context.Context, retry func(ctx context.Context, step string, f func(context.Context) error) error) error {
	key := k.d.Links.Secret
	if len(key) == 0 {
		err := retry(ctx, "link key", func(ctx context.Context) error {
			var err error
			key, err = k.linkKey(ctx)
			return err
		})
		if err != nil {
			return err
		}
	}
	sg, err := links.NewSigner(key)
	if err != nil {
		return err
	}
	k.signer = sg
	return nil
}

// linkKey returns the link-signing key kept in the database, generating 32
// random bytes the first time. Replicas starting together race safely: each
// offers its own key with ON CONFLICT DO NOTHING, exactly one insert wins,
// and every replica then reads the winner. The key never leaves the database
// and this process (no log line, no error carries it).
func (k *Keeper) linkKey(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("runner: link key: %w", err)
	}
	if err := k.tables.Keys.Offer(ctx, k.db(), linkKeyName, base64.StdEncoding.EncodeToString(fresh)); err != nil {
		return nil, fmt.Errorf("runner: link key: store: %w", err)
	}
	v, err := k.tables.Keys.Get(ctx, k.db(), linkKeyName)
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

// Signer is the link signer the /artifacts route verifies tokens with (nil
// before OpenSigner).
func (k *Keeper) Signer() *links.Signer { return k.signer }

// Link is the thread's link to one artifact, or false for none: route mode
// links the daemon's /artifacts route with a token signed for exactly this
// run and key (a click on S3 is redirected to a presigned URL made then, so
// the link outlives a presigned URL's 7 days); presigned mode uses the
// store's own link, its lifetime said in the text.
func (k *Keeper) Link(ctx context.Context, runID string, a vocab.Artifact) (notify.Link, bool) {
	l := k.d.Links
	if l.Mode == config.LinksPresigned {
		st := k.store()
		if st == nil {
			return notify.Link{}, false
		}
		u, valid, err := st.Link(ctx, a.Key)
		if err != nil {
			k.log.Warn("No link to an artifact.", zap.String("run", runID), zap.String("key", a.Key), zap.Error(err))
			return notify.Link{}, false
		}
		return notify.Link{Name: a.Name, URL: u, Valid: valid}, true
	}
	if l.BaseURL == "" || k.signer == nil {
		return notify.Link{}, false
	}
	ttl := l.TTL
	if ttl <= 0 {
		ttl = config.DefaultLinkTTL
	}
	q := k.signer.Sign(runID, a.Key, k.d.Now().Add(ttl))
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
