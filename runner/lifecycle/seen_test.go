package lifecycle

import (
	"encoding/json"
	"testing"

	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vocab"
)

// TestKeyArtifact: a run's key artifact is the report of the profile that
// refined its verdict, wherever that step stands; else the first artifact
// of the step that reached the verdict; none when neither kept one.
func TestKeyArtifact(t *testing.T) {
	trace := vocab.Artifact{Name: "rank0.pt.trace.json.gz", Key: "k/trace", ContentType: "application/gzip"}
	report := vocab.Artifact{Name: "profile-report.json", Key: "k/report", ContentType: "application/json"}
	evidence := vocab.Artifact{Name: "triage.json", Key: "k/triage", ContentType: "application/json"}
	chart := vocab.Artifact{Name: "kv.png", Key: "k/chart", ContentType: "image/png"}
	verdict := &vocab.Verdict{ID: vocab.VerdictKVPressure}
	for name, tc := range map[string]struct {
		records []executor.StepRecord
		want    string
	}{
		"profile report": {[]executor.StepRecord{{ID: "chart", Artifacts: []vocab.Artifact{chart}},
			{ID: "triage", Verdict: verdict, Artifacts: []vocab.Artifact{evidence}},
			{ID: "profile", Profile: &vocab.ProfileFinding{Family: "gemm"}, Artifacts: []vocab.Artifact{trace, report}}}, "k/report"},
		"no profile": {[]executor.StepRecord{{ID: "chart", Artifacts: []vocab.Artifact{chart}},
			{ID: "triage", Verdict: verdict, Artifacts: []vocab.Artifact{evidence}},
			{ID: "profile", Artifacts: []vocab.Artifact{trace, report}}}, "k/triage"},
		"nothing kept": {[]executor.StepRecord{{ID: "chart", Artifacts: []vocab.Artifact{chart}},
			{ID: "triage", Verdict: verdict}}, ""},
	} {
		var raw []string
		for _, r := range tc.records {
			r.Tier = vocab.TierMetrics
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			raw = append(raw, string(b))
		}
		raw = append(raw, "{not json")
		a, ok := keyArtifact(raw)
		if ok != (tc.want != "") || a.Key != tc.want {
			t.Errorf("%s: %+v %v, want %q", name, a, ok, tc.want)
		}
	}
}
