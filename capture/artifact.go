package capture

import (
	"bytes"
	"context"
	"fmt"

	"github.com/autocapture/autocapture/storage"
)

// putArtifact stores body as the step's artifact called name, under
// runs/<run>/<step>/<name>. A run without a store keeps no artifact and says so.
func putArtifact(ctx context.Context, in *Input, name, contentType string, body []byte) (Artifact, error) {
	if in.Env == nil || in.Env.Store == nil {
		return Artifact{}, Errorf(ReasonBadConfig, "artifact %s: no store configured", name)
	}
	key := storage.Key("runs", in.RunID, in.StepID, name)
	obj, err := in.Env.Store.Put(ctx, key, bytes.NewReader(body), storage.Meta{ContentType: contentType})
	if err != nil {
		return Artifact{}, fmt.Errorf("artifact %s: %w", key, err)
	}
	return Artifact{Name: name, Key: obj.Key, ContentType: contentType, Size: obj.Size, SHA256: obj.SHA256}, nil
}
