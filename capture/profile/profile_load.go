package profile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// profileLoadConcurrency bounds the load's requests in flight: a few at a
// time is representative and cannot swamp the server being profiled.
const profileLoadConcurrency = 4

// loadPlan is what the step decided about the load before the frame.
type loadPlan struct {
	send bool
	// why is the reason when not sent ("12 requests waiting …").
	why string
}

// planLoad decides whether the representative load may be sent: never when
// requests are already waiting. The waiting count comes from a fresh read of
// the target's /metrics and from every earlier step's queue_depth signal;
// either one above zero, or neither known, keeps the load off.
func (p *Profile) planLoad(ctx context.Context, in *vocab.Input, client *http.Client, target string) loadPlan {
	if p.cfg.Load == nil {
		return loadPlan{}
	}
	ids := make([]string, 0, len(in.Prior))
	for id := range in.Prior {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	known := false
	for _, id := range ids {
		r := in.Prior[id]
		if r == nil {
			continue
		}
		if v, ok := r.Signals[vocab.SigQueueDepth]; ok {
			known = true
			if v > 0 {
				return loadPlan{why: fmt.Sprintf("not sent: step %s saw %g requests waiting", id, v)}
			}
		}
	}
	if v, ok := p.requestsWaiting(ctx, client, target); ok {
		if v > 0 {
			return loadPlan{why: fmt.Sprintf("not sent: %g requests waiting on %s now", v, httpTarget(target))}
		}
		return loadPlan{send: true}
	}
	if !known {
		return loadPlan{why: "not sent: the waiting requests could not be read (/metrics), so the queue may not be empty"}
	}
	return loadPlan{send: true}
}

// loadOutcome counts what the load did.
type loadOutcome struct {
	sent, ok, failed atomic.Int64
	firstErr         atomic.Pointer[string]
}

// runLoad sends the load's requests to target's /v1/completions, a few at a
// time, until all are sent or ctx (the frame) ends; it returns when every
// request it sent has returned.
func (p *Profile) runLoad(ctx context.Context, in *vocab.Input, client *http.Client, target string, out *loadOutcome) {
	l := p.cfg.Load
	model := l.Model
	if model == "" {
		model = in.Alert.Labels["model_name"]
	}
	body := map[string]any{
		// "the " is one token in every tokenizer vLLM ships (and four
		// characters, vllmsim's estimate), so the prompt is about
		// prompt_tokens long.
		"prompt":      strings.Repeat("the ", l.PromptTokens),
		"max_tokens":  l.MaxTokens,
		"temperature": 0,
		"ignore_eos":  true, // vLLM's extension: generate max_tokens, a steady decode
	}
	if model != "" {
		body["model"] = model
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return
	}
	sem := make(chan struct{}, profileLoadConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for range l.Requests {
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		out.sent.Add(1)
		wg.Go(func() {
			defer func() { <-sem }()
			if err := completion(ctx, client, target, payload); err == nil {
				out.ok.Add(1)
			} else {
				out.failed.Add(1)
				msg := err.Error()
				out.firstErr.CompareAndSwap(nil, &msg)
			}
		})
	}
}

// completion POSTs one completion request and drains the answer.
func completion(ctx context.Context, client *http.Client, target string, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/completions", bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return stepkit.HTTPStatusError("POST /v1/completions", resp.StatusCode, string(b))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return nil
}
