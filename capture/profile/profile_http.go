package profile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/capture/internal/sglangexpo"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// ErrNotArmed is a profiler route's 404: the server runs without
// --profiler-config, so /start_profile and /stop_profile do not exist. On a
// stop it means nothing records there (the server restarted unarmed, say):
// no stop is owed and none can be given.
var ErrNotArmed = errors.New("profiler not armed")

// errNotArmed is ErrNotArmed under its in-package name.
var errNotArmed = ErrNotArmed

// howToArm is the finding an unarmed server gets: how to arm it, with
// max_iterations as the server-side stop that holds even if this daemon dies.
const howToArm = `start the server with --profiler-config '{"profiler":"torch","torch_profiler_dir":"/profiles","max_iterations":2000}' ` +
	`(max_iterations stops the recording on the server's side even if autocapture dies mid-frame; ` +
	`arming records nothing until start_profile)`

// preflight wants the target to answer GET /health with a 2xx within the
// tuning's bound.
func (p *Profile) preflight(ctx context.Context, client *http.Client, target string) error {
	ctx, cancel := context.WithTimeout(ctx, p.tune.health)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/health", nil)
	if err != nil {
		return vocab.Errorf(vocab.ReasonBadConfig, "profile %s: health: %v", target, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("profile %s: preflight GET /health: %w", target, err)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode/100 != 2 {
		return stepkit.HTTPStatusError(fmt.Sprintf("profile %s: preflight GET /health", target), resp.StatusCode, string(body))
	}
	return nil
}

// errSGLangRefused marks an SGLang start answered with an error: it raised
// before anything recorded.
var errSGLangRefused = errors.New("sglang refused the start")

// startProfile sends POST /start_profile once, with body when not nil (a
// JSON ProfileReqInput for SGLang). A 404 is errNotArmed; an error that
// proves nothing began recording is marked by notSent, so the caller knows
// no stop is owed: the dial failed, or SGLang answered with an error (it
// raises before anything records, SGLANG.md §5).
func startProfile(ctx context.Context, client *http.Client, target, engine string, body []byte) (notSent bool, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/start_profile", rd)
	if err != nil {
		return true, vocab.Errorf(vocab.ReasonBadConfig, "profile %s: start_profile: %v", target, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		refused := errors.Is(err, syscall.ECONNREFUSED) || vocab.Classify(err) == vocab.ReasonRefused
		return refused, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("profile %s: start_profile: %w", target, err)}
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<12))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return true, &vocab.Error{Reason: vocab.ReasonUpstream4xx, Err: fmt.Errorf("profile %s: start_profile: HTTP 404: %w", target, errNotArmed)}
	case resp.StatusCode/100 != 2:
		err := stepkit.HTTPStatusError(fmt.Sprintf("profile %s: start_profile", target), resp.StatusCode, string(reply))
		if engine == vocab.EngineSGLang {
			return true, fmt.Errorf("%w: %w", errSGLangRefused, err)
		}
		return false, err
	}
	return false, nil
}

// requestsWaiting reads the waiting queue from the target's /metrics: vLLM's
// num_requests_waiting summed over engines and models, or SGLang's
// num_queue_reqs summed over its ranks (priority "" only: the total under
// priority scheduling, SGLANG.md §4; more than zero is all the load guard
// asks). ok false when it cannot be read.
func (p *Profile) requestsWaiting(ctx context.Context, client *http.Client, target string) (float64, bool) {
	ctx, cancel := context.WithTimeout(ctx, p.tune.health)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, stepkit.MaxScrapeBytes))
	if err != nil {
		return 0, false
	}
	e, err := exposition.ParseExposition(body, nil)
	if err != nil {
		return 0, false
	}
	if e.Engine() == vocab.EngineSGLang {
		return e.Value(sglangexpo.Queue, exposition.AggSum, func(ls map[string]string) bool { return ls["priority"] == "" })
	}
	return e.Value(exposition.VMWaiting, exposition.AggSum, nil)
}

// httpTarget is the target's host:port for messages.
func httpTarget(base string) string {
	if i := strings.Index(base, "://"); i >= 0 {
		return base[i+3:]
	}
	return base
}
