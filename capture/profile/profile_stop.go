package profile

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// StopProfile sends POST /stop_profile to target (a base URL) through client
// and waits for the answer, which may take minutes (the flush): ctx bounds
// it. The profile step and the runner's sweeper (a recording whose owner is
// gone) both stop through it.
func StopProfile(ctx context.Context, client *http.Client, target string) error {
	return profileCall(ctx, client, target, "/stop_profile")
}

// profileCall POSTs an empty body to target+path and wants a 2xx.
func profileCall(ctx context.Context, client *http.Client, target, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(target, "/")+path, nil)
	if err != nil {
		return vocab.Errorf(vocab.ReasonBadConfig, "%s: %v", path, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<12))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s %s: HTTP 404: %w", target, path, ErrNotArmed)
	}
	if resp.StatusCode/100 != 2 {
		return &statusError{target: target, path: path, code: resp.StatusCode, body: string(body)}
	}
	return nil
}

// statusError is a profiler call's non-2xx answer; body is its start, for
// the engines whose reply says why (the message is not in the error text).
type statusError struct {
	target, path string
	code         int
	body         string
}

func (e *statusError) Error() string { return fmt.Sprintf("%s %s: HTTP %d", e.target, e.path, e.code) }
