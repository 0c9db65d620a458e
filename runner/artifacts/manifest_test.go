package artifacts

import (
	"testing"

	"github.com/autocapture/autocapture/runner/executor"
)

// TestManifestTargetVersionOnlyFromVersionEndpoint: a JSON "version" from
// another endpoint (a model card) is not the target's version.
func TestManifestTargetVersionOnlyFromVersionEndpoint(t *testing.T) {
	rec := func(url string) executor.StepRecord {
		return executor.StepRecord{Kind: "http", Findings: map[string]any{"url": url, "json": map[string]any{"version": "9"}}}
	}
	if v := targetVersion([]executor.StepRecord{rec("http://h:8000/v1/models")}); v != "" {
		t.Errorf("version from /v1/models = %q, want none", v)
	}
	if v := targetVersion([]executor.StepRecord{rec("http://h:8000/v1/models"), rec("http://h:8000/version?x=1")}); v != "9" {
		t.Errorf("version from /version = %q, want 9", v)
	}
}
