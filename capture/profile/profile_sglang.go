package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// ErrNotRecording is SGLang's "Profiling is not in progress" on a stop: the
// recording had already ended (its num_steps auto-stop wrote the files, or
// the server restarted). Nothing records there, so the stop is done.
var ErrNotRecording = errors.New("profiler not recording")

// How SGLang answers a profiler call it refuses (SGLANG.md §5): the
// tokenizer raises RuntimeError, an uncaught exception, so the caller sees
// Starlette's bare 500 and the message only lands in the server's log.
// /stop_profile's one refusal is "Profiling is not in progress" (an export
// that fails kills the scheduler, which is a dropped connection, not a 500),
// so a 500 from an SGLang stop means nothing records: done. Some builds and
// proxies pass the message through; it is recognised either way.
const sglangNotInProgress = "not in progress"

// sglangStartBody is the ProfileReqInput the step sends (SGLANG.md §5):
// the folder on the server, CPU+GPU activity (or CUDA_PROFILER under nsys),
// a prefix naming this capture so collection takes only its files, and
// num_steps when the playbook sets a server-side bound.
func (p *Profile) sglangStartBody(prefix string) []byte {
	body := map[string]any{"activities": []string{"CPU", "GPU"}, "profile_prefix": prefix}
	if p.cfg.Expect == ExpectCUDA {
		body["activities"] = []string{"CUDA_PROFILER"}
	}
	if dir := p.outputDir(); dir != "" {
		body["output_dir"] = dir
	}
	if p.cfg.NumSteps > 0 {
		body["num_steps"] = p.cfg.NumSteps
	}
	b, _ := json.Marshal(body)
	return b
}

// outputDir is where SGLang is asked to write: output_dir, else the
// collect folder (the same path on the server's side of a shared volume),
// else "" (the server's SGLANG_TORCH_PROFILER_DIR, else /tmp).
func (p *Profile) outputDir() string {
	if p.cfg.OutputDir != "" {
		return p.cfg.OutputDir
	}
	return p.cfg.Collect.Dir
}

// capturePrefix is the profile_prefix of one run's step: SGLang names each
// rank's file "<prefix>-<profile_id>-TP-<r>…", so the files of this capture
// are told from any other in a shared folder. Only [A-Za-z0-9._-] is kept.
func capturePrefix(runID, stepID string) string {
	clean := func(s string, n int) string {
		var b strings.Builder
		for _, r := range s {
			if r < 128 && (r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				b.WriteRune(r)
			}
		}
		out := b.String()
		if len(out) > n {
			out = out[:n]
		}
		return out
	}
	return "autocapture-" + clean(runID, 64) + "-" + clean(stepID, 48)
}

// sglangOwns says whether name is one of this capture's SGLang files:
// "<prefix>-<profile_id>-TP-<r>[…].trace.json.gz" (per rank, per stage), or
// rank 0's merged trace. A name in a subfolder is matched by its base.
func sglangOwns(name, prefix string) bool {
	base := path.Base(name)
	if !strings.HasSuffix(base, ".trace.json.gz") {
		return false
	}
	return strings.HasPrefix(base, prefix+"-") && strings.Contains(base, "-TP-")
}

// sglangUnprefixedName is a rank file of a build without profile_prefix
// (SGLANG.md §5: "{profile_id}-TP-{tp}[-DP-…][-PP-…][-EP-…][-stage]").
var sglangUnprefixedName = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?-TP-[0-9]+(-DP-[0-9]+)?(-PP-[0-9]+)?(-EP-[0-9]+)?(-EXTEND|-DECODE)?\.trace\.json\.gz$`)

// sglangUnprefixed says whether name is an SGLang rank file with no prefix.
func sglangUnprefixed(name string) bool { return sglangUnprefixedName.MatchString(path.Base(name)) }

// stopFor sends engine's stop_profile to target. For SGLang a 500 (or a
// message naming "not in progress") is ErrNotRecording.
func stopFor(ctx context.Context, client *http.Client, target, engine string) error {
	err := StopProfile(ctx, client, target)
	var st *statusError
	if engine == vocab.EngineSGLang && errors.As(err, &st) &&
		(st.code == http.StatusInternalServerError || strings.Contains(st.body, sglangNotInProgress)) {
		return fmt.Errorf("%s /stop_profile: HTTP %d (SGLang: profiling is not in progress): %w", target, st.code, ErrNotRecording)
	}
	return err
}

// StopRecording stops what a lease recorded, in its engine's dialect: saved
// is what the step stored with the recording (ProfileLease.Recording's
// saved; empty or unreadable: vLLM's). The runner's sweeper stops a capture
// whose owner died through it. SGLang's "not in progress" is done (nil):
// nothing records there.
func StopRecording(ctx context.Context, client *http.Client, target string, saved []byte) error {
	var s savedListing
	if len(saved) > 0 {
		_ = json.Unmarshal(saved, &s)
	}
	err := stopFor(ctx, client, target, s.engine())
	if errors.Is(err, ErrNotRecording) {
		return nil
	}
	return err
}

// sglangStartRefused is the finding and summary of an SGLang start that
// answered with an error: SGLang raises before anything records (a second
// start while someone else's recording runs is "Profiling is already in
// progress"), so no stop is owed, and none may be sent: it would end the
// other recording.
func sglangStartRefused(target string, err error) string {
	return fmt.Sprintf("start_profile refused by %s (%v): SGLang starts nothing on an error; if another recording is in progress "+
		"(someone's /start_profile), it is left alone, no stop sent", httpTarget(target), vocab.Classify(err))
}
