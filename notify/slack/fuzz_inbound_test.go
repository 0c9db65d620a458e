package slack

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// FuzzInteraction checks POST /hooks/slack/interactions on any signed body:
// every request is signed with the right secret at the endpoint's clock, so the
// fuzzer reaches past the signature check into the form and payload parsing.
// Promises: never a panic, never a 5xx (the store never fails here); a body
// whose form or payload JSON does not decode is 400 bad_payload with a
// one-line reason; one that decodes is 200; a body over the limit is 413; a
// click recorded is one of our two buttons on a run the store knows.
//
// raw is sent as it is when wrap is false; otherwise payload is put in a
// form's payload field, as Slack sends it. Seeds: the block_actions shapes of
// inbound_test.go (clickBody) and Slack's other interaction types.
//
//	go test ./notify/slack -run '^$' -fuzz FuzzInteraction -fuzztime 60s
func FuzzInteraction(f *testing.F) {
	for _, b := range [][]byte{
		clickBody(ActionVerdictRight, FeedbackValue("r1", "kv-pressure")),
		clickBody(ActionVerdictWrong, FeedbackValue("r1", "overload")),
		clickBody(ActionVerdictRight, "r9|kv-pressure"),
		clickBody(ActionVerdictRight, "r1"),
		clickBody("link_0", "Grafana"),
		[]byte("payload=nope"),
		[]byte("payload=%7B%22type%22%3A%22view_submission%22%7D"),
		[]byte("payload=%zz"),
		[]byte("a=1&payload=null&payload=2"),
		{},
	} {
		f.Add(b, "", false)
	}
	for _, p := range []string{
		`{"type":"block_actions","user":{"id":"U0ALICE","username":"alice"},"actions":[{"action_id":"` +
			ActionVerdictWrong + `","value":"r1|kv-pressure"},{"action_id":"` + ActionVerdictRight + `","value":"r1|x"}]}`,
		`{"type":"block_actions","actions":null,"user":null}`,
		`{"type":"block_actions","actions":[{"action_id":7}]}`,
		`{"type":"shortcut","callback_id":"x","trigger_id":"1.2.3"}`,
		`{"type":"message_action","message":{"ts":1}}`,
		`[]`, `"block_actions"`, `{"type":"block_actions","user":{"id":"\u0000"},"actions":[{"action_id":"` +
			ActionVerdictRight + `","value":"|"}]}`,
	} {
		f.Add([]byte(nil), p, true)
	}
	fz := newFuzzInteractions(f)
	f.Fuzz(func(t *testing.T, raw []byte, payload string, wrap bool) {
		body := raw
		if wrap {
			body = []byte(url.Values{"payload": {payload}}.Encode())
		}
		code, eb, recorded := fz.post(t, body)
		if code >= 500 {
			t.Fatalf("answered %d %+v for body %q", code, eb, body)
		}
		if len(body) > maxInteractionBytes {
			if code != http.StatusRequestEntityTooLarge {
				t.Fatalf("%d-byte body answered %d, want 413", len(body), code)
			}
			return
		}
		want, decodeErr := expectInteraction(body)
		if code != want {
			t.Fatalf("answered %d %+v, want %d (decode: %v) for body %q", code, eb, want, decodeErr, body)
		}
		if code == http.StatusBadRequest && (eb.Error != "bad_payload" || eb.Reason == "" || strings.ContainsAny(eb.Reason, "\r\n")) {
			t.Fatalf("400 with error body %+v, want bad_payload with a one-line reason", eb)
		}
		for _, a := range recorded {
			if a.run != "r1" || a.verdict == "" {
				t.Fatalf("recorded %+v: only a known run with a verdict may be recorded", a)
			}
		}
	})
}

// expectInteraction is the oracle: 400 when the form or its payload field
// does not decode as the handler reads it, 200 otherwise.
func expectInteraction(body []byte) (int, error) {
	form, err := url.ParseQuery(string(body))
	if err == nil {
		var in interaction
		err = json.Unmarshal([]byte(form.Get("payload")), &in)
	}
	if err != nil {
		return http.StatusBadRequest, err
	}
	return http.StatusOK, nil
}

// fuzzInteractions is one endpoint for the whole fuzz run. Its clock moves on
// by more than Slack's replay window before each request, so no input is
// refused as a replay of an earlier one with the same bytes.
type fuzzInteractions struct {
	mu  sync.Mutex // one request at a time: the clock and the recorded answers
	now time.Time
	fb  *fakeFeedback
	in  *inbound
}

func newFuzzInteractions(f *testing.F) *fuzzInteractions {
	fz := &fuzzInteractions{now: clickNow, fb: &fakeFeedback{known: map[string]bool{"r1": true}}}
	fz.in = newInbound(f, fz.fb, func() time.Time { return fz.now })
	return fz
}

// post sends body signed at a fresh time and returns the code, the error
// body (if any) and the answers it recorded.
func (fz *fuzzInteractions) post(t *testing.T, body []byte) (int, errorBody, []answer) {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	fz.now = fz.now.Add(2*signatureWindow + time.Second)
	before := len(fz.fb.recorded())
	rec := fz.in.serve(newRequest(body, signed(signingSecret, fz.now, body), false))
	var eb errorBody
	if rec.Code != http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil {
			t.Fatalf("answered %d with a body that is not an error body: %q", rec.Code, rec.Body)
		}
	}
	return rec.Code, eb, fz.fb.recorded()[before:]
}
