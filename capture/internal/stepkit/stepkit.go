// Package stepkit is what capture's step families share and no other package
// needs: storing an artifact, the input's logger and clock, an upstream's
// HTTP error, a configured Prometheus's client, the bounds of a scrape.
package stepkit

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// EnvNow is the env's clock reading: Env.Now, else time.Now.
func EnvNow(e *vocab.Env) time.Time {
	if e == nil || e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

// Logger returns the input's logger, or a no-op one.
func Logger(in *vocab.Input) *zap.Logger {
	if in == nil || in.Log == nil {
		return zap.NewNop()
	}
	return in.Log
}

// PutArtifact stores body as the step's artifact called name, under the
// browsable layout of storage.ArtifactKey (…/<step>/attempt-<n>/<name> on a
// resumed attempt: a store never overwrites a key, and a step re-run after a
// crash gathers new bytes). A run without a store keeps no artifact and says so.
func PutArtifact(ctx context.Context, in *vocab.Input, name, contentType string, r io.Reader) (vocab.Artifact, error) {
	if in.Env == nil || in.Env.Store == nil {
		return vocab.Artifact{}, vocab.Errorf(vocab.ReasonBadConfig, "artifact %s: no store configured", name)
	}
	key := storage.ArtifactKey(storage.ArtifactPath{Started: in.RunCreated, Alertname: in.Alert.Labels["alertname"],
		RunID: in.RunID, Plan: in.Plan, Step: in.StepID, File: name, Attempt: in.Attempt})
	obj, err := in.Env.Store.Put(ctx, key, r, vocab.ObjectMeta{ContentType: contentType})
	if err != nil {
		return vocab.Artifact{}, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("store %s: %w", key, err)}
	}
	return vocab.Artifact{Name: name, Key: obj.Key, ContentType: contentType, Size: obj.Size, SHA256: obj.SHA256, Pending: obj.Pending}, nil
}

// SleepCtx waits d or until ctx ends, whichever is first.
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
