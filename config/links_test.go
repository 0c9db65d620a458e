package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestLinkDefaults(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("web:\n  external_url: https://ac.example\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Web.LinkTTL != 30*24*time.Hour || cfg.Storage.Links != LinksRoute || cfg.Runs.MaxArtifactBytes != 2<<30 {
		t.Fatalf("link_ttl %v, links %q, max_artifact_bytes %d", cfg.Web.LinkTTL, cfg.Storage.Links, cfg.Runs.MaxArtifactBytes)
	}
	if !cfg.Web.LinkSecret.Blank() {
		t.Fatal("a link secret by default")
	}
}

func TestLinkSecretFromFileNeverPrints(t *testing.T) {
	f := writeFile(t, t.TempDir(), "link", "  link-canary-0123456789abcdef\n")
	cfg, err := Parse("c.yaml", []byte("web:\n  link_secret_file: "+f+"\n  link_ttl: 72h\nstorage:\n  links: presigned\nruns:\n  max_artifact_bytes: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Web.LinkSecret.Reveal() != "link-canary-0123456789abcdef" || cfg.Web.LinkTTL != 72*time.Hour ||
		cfg.Storage.Links != LinksPresigned || cfg.Runs.MaxArtifactBytes != 0 {
		t.Fatalf("got %+v %+v %+v", cfg.Web, cfg.Storage.Links, cfg.Runs.MaxArtifactBytes)
	}
	j, _ := json.Marshal(cfg)
	if strings.Contains(string(j), "canary") {
		t.Fatalf("the link secret printed: %s", j)
	}
}

func TestLinkValidationNamesLines(t *testing.T) {
	dir := t.TempDir()
	empty := writeFile(t, dir, "empty", "\n")
	short := writeFile(t, dir, "short", "abc\n")
	checkParseErrors(t, []parseErrCase{
		{"zero ttl", "web:\n  link_ttl: 0s\n", []string{"c.yaml:2:13: web.link_ttl: 0s: must be more than 0"}},
		{"negative ttl", "web:\n  link_ttl: -1h\n", []string{"c.yaml:2:13: web.link_ttl"}},
		{"bad links", "storage:\n  links: s3\n", []string{`c.yaml:2:10: storage.links: want route or presigned, got "s3"`}},
		{"empty secret file", "web:\n  link_secret_file: " + empty + "\n", []string{"web.link_secret_file:", "is empty"}},
		{"short secret file", "web:\n  link_secret_file: " + short + "\n", []string{"c.yaml:2:21: web.link_secret_file: holds 3 bytes: at least 16"}},
		{"short inline secret", "web:\n  link_secret: abc\n", []string{"c.yaml:2:16: web.link_secret: holds 3 bytes"}},
		{"both", "web:\n  link_secret: 0123456789abcdef\n  link_secret_file: " + short + "\n", []string{"link_secret and link_secret_file are both set"}},
		{"negative cap", "runs:\n  max_artifact_bytes: -1\n", []string{"c.yaml:2:23: runs.max_artifact_bytes: -1: must not be negative"}},
	}, func(t *testing.T, err error) {
		if strings.Contains(err.Error(), "abc") {
			t.Errorf("the secret's content is in the error: %v", err)
		}
	})
}
