package vllmsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// completionRequest holds the fields of /v1/completions and
// /v1/chat/completions the sim uses.
type completionRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// promptTokens estimates a prompt's token count at four characters a token,
// plus the chat template's few tokens per message.
func (c *completionRequest) promptTokens(chat bool) int {
	if chat {
		n := 3
		for _, m := range c.Messages {
			b, _ := json.Marshal(m.Content)
			n += 4 + ceilDiv(len(b), 4)
		}
		return n
	}
	var s string
	if json.Unmarshal(c.Prompt, &s) == nil {
		return max(1, ceilDiv(len(s), 4))
	}
	return max(1, ceilDiv(len(c.Prompt), 4))
}

var traceContext = propagation.TraceContext{}

func (s *Sim) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.serveCompletion(w, r, false)
}

func (s *Sim) handleChat(w http.ResponseWriter, r *http.Request) { s.serveCompletion(w, r, true) }

// serveCompletion runs one request through the engine and answers once the
// model's timing says it is done; a client that goes away aborts it.
func (s *Sim) serveCompletion(w http.ResponseWriter, r *http.Request, chat bool) {
	var body completionRequest
	if err := decodeBody(w, r, &body); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if body.Model != "" && body.Model != s.opts.Model {
		apiError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", body.Model))
		return
	}
	if body.Stream {
		apiError(w, http.StatusBadRequest, "BadRequestError", "vllmsim: streaming responses are not simulated; send stream=false")
		return
	}
	if chat && len(body.Messages) == 0 {
		apiError(w, http.StatusBadRequest, "BadRequestError", "messages: at least one message is required")
		return
	}
	req, err := s.newHTTPRequest(r, &body, chat)
	if err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if id := r.Header.Get("X-Request-Id"); id != "" {
		w.Header().Set("X-Request-Id", id)
	}
	if err := s.submit(r.Context(), req); err != nil {
		return // the client is gone; the engine aborts the request
	}
	writeJSON(w, http.StatusOK, completionResponse(req, s.opts.Model, chat, s.Now()))
}

// newHTTPRequest builds the engine request: its id from X-Request-Id, its
// parent from traceparent, its output length from the scenario's
// distribution capped by max_tokens.
func (s *Sim) newHTTPRequest(r *http.Request, body *completionRequest, chat bool) (*request, error) {
	prompt := body.promptTokens(chat)
	maxLen := s.opts.EngineConfig.MaxModelLen
	maxTokens := 16 // vLLM's default for /v1/completions
	set := false
	for _, v := range []*int{body.MaxTokens, body.MaxCompletionTokens} {
		if v != nil {
			maxTokens, set = *v, true
		}
	}
	if !set && chat {
		maxTokens = maxLen - prompt
	}
	if maxTokens < 1 {
		return nil, fmt.Errorf("max_tokens must be at least 1, got %d", maxTokens)
	}
	if prompt+maxTokens > maxLen {
		return nil, fmt.Errorf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, prompt+maxTokens, prompt, maxTokens)
	}
	if body.N != nil && *body.N != 1 {
		return nil, fmt.Errorf("vllmsim: n=%d is not simulated; use n=1", *body.N)
	}
	s.mu.Lock()
	target := int(sampleDist(s.load.rng, s.scenario.Load.OutputTokens))
	id := r.Header.Get("X-Request-Id")
	if id == "" {
		id = fmt.Sprintf("%016x%016x", s.load.rng.Uint64(), s.load.rng.Uint64())
	}
	s.mu.Unlock()
	req := &request{
		id:        id,
		parent:    trace.SpanContextFromContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))),
		prompt:    prompt,
		target:    min(max(target, 1), maxTokens),
		maxTokens: maxTokens,
		params:    requestParams{maxTokensSet: set, temperature: body.Temperature, topP: body.TopP, n: 1},
		client:    -1,
	}
	return req, nil
}

// submit hands req to the engine and waits for it to finish; if ctx ends
// first the request is marked aborted and ctx's error returned.
func (s *Sim) submit(ctx context.Context, req *request) error {
	req.wait = make(chan struct{})
	s.mu.Lock()
	if s.running {
		if t := time.Since(s.opts.Start); t > s.eng.now {
			s.advanceTo(t)
		}
	}
	s.eng.add(req)
	s.mu.Unlock()
	select {
	case <-req.wait:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		req.abortRequested = true
		s.mu.Unlock()
		return ctx.Err()
	}
}

var words = strings.Fields("the engine schedules tokens while the cache holds blocks of keys and values for every sequence in the batch")

// completionResponse is the OpenAI-shaped answer for a finished request.
func completionResponse(r *request, model string, chat bool, now time.Time) map[string]any {
	var text strings.Builder
	for i := range r.generated {
		if i > 0 {
			text.WriteByte(' ')
		}
		text.WriteString(words[i%len(words)])
	}
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": r.reason, "stop_reason": nil}
	object, prefix := "text_completion", "cmpl-"
	if chat {
		object, prefix = "chat.completion", "chatcmpl-"
		choice["message"] = map[string]any{"role": "assistant", "content": text.String(), "tool_calls": []any{}}
	} else {
		choice["text"] = text.String()
	}
	return map[string]any{
		"id": prefix + r.id, "object": object, "created": now.Unix(), "model": model,
		"choices": []any{choice},
		"usage": map[string]any{
			"prompt_tokens": r.prompt, "completion_tokens": r.generated,
			"total_tokens": r.prompt + r.generated, "prompt_tokens_details": nil,
		},
	}
}
