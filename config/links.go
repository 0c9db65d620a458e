package config

import (
	"time"

	"github.com/autocapture/autocapture/links"
)

// The values of storage.links: how a thread links an artifact.
const (
	// LinksRoute: a signed link to the daemon's own /artifacts route under
	// web.external_url (lifetime web.link_ttl); a click on S3 is redirected
	// to a presigned URL made at that moment.
	LinksRoute = "route"
	// LinksPresigned: the store's own link (S3: presigned, valid at most
	// storage.s3.link_expiry, said in the link's text).
	LinksPresigned = "presigned"
)

// DefaultLinkTTL is web.link_ttl's default: a thread's links work for a month.
const DefaultLinkTTL = 30 * 24 * time.Hour

// DefaultMaxArtifactBytes is runs.max_artifact_bytes' default: 2 GiB a run.
const DefaultMaxArtifactBytes = 2 << 30

// checkLinks validates the artifact link settings: web.link_ttl,
// storage.links and a configured link secret's length.
func (v *validator) checkLinks(c *Config) {
	if c.Web.LinkTTL <= 0 {
		v.errorf("$.web.link_ttl", "%v: must be more than 0", c.Web.LinkTTL)
	}
	switch c.Storage.Links {
	case LinksRoute, LinksPresigned:
	default:
		v.errorf("$.storage.links", "want route or presigned, got %q", c.Storage.Links)
	}
	// A blank or unreadable secret is reported by checkSecrets, once.
	if s := c.Web.LinkSecret; !s.Blank() && len(s.Reveal()) < links.MinKeyBytes {
		path := "$.web.link_secret"
		if c.Web.LinkSecretFile != "" {
			path += "_file"
		}
		v.errorf(path, "holds %d bytes: at least %d (e.g. openssl rand -hex 32)", len(s.Reveal()), links.MinKeyBytes)
	}
	if c.Runs.MaxArtifactBytes < 0 {
		v.errorf("$.runs.max_artifact_bytes", "%d: must not be negative (0 is unlimited)", c.Runs.MaxArtifactBytes)
	}
}
