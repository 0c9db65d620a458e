package slackstub

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

// raw sends one request as given and returns the status and body.
func raw(t *testing.T, s *Server, verb, method, query, contentType, body string, bearer bool) (int, string) {
	t.Helper()
	u := s.URL() + method
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequest(verb, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if bearer {
		req.Header.Set("Authorization", "Bearer xoxb-test")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const form = "application/x-www-form-urlencoded"

// TestRefusals: each refusal answers the status and body Slack gives it
// (missing and mistyped arguments, an unknown method, a verb refused, a
// token where Slack does not read it), and what Slack accepts goes through.
func TestRefusals(t *testing.T) {
	s := New(t)
	missing := func(fields ...string) string {
		var m []string
		for _, f := range fields {
			m = append(m, `"[ERROR] missing required field: `+f+`"`)
		}
		return `{"ok":false,"error":"invalid_arguments","response_metadata":{"messages":[` + strings.Join(m, ",") + `]}}`
	}
	typed := func(code, what, field string) string {
		return `{"ok":false,"error":"` + code + `","response_metadata":{"messages":["[ERROR] must be ` + what + ` [json-pointer:/` + field + `]"]}}`
	}
	for _, tc := range []struct {
		name, verb, method, query, contentType, body string
		bearer                                       bool
		status                                       int
		want                                         string // the JSON answer; for a refused verb, the text
	}{
		{"unknown method", "POST", "chat.postMessages", "", form, "token=xoxb-test&channel=C0001&text=x", false, 200, `{"ok":false,"error":"unknown_method"}`},
		{"unknown method before auth", "POST", "chat.nope", "", form, "channel=C0001", false, 200, `{"ok":false,"error":"unknown_method"}`},
		{"post without channel", "POST", "chat.postMessage", "", form, "token=xoxb-test&text=x", false, 200, missing("channel")},
		{"post with an empty channel", "POST", "chat.postMessage", "", form, "token=xoxb-test&channel=&text=x", false, 200, missing("channel")},
		{"post without text", "POST", "chat.postMessage", "", form, "token=xoxb-test&channel=C0001", false, 200, `{"ok":false,"error":"no_text"}`},
		{"update without channel and ts", "POST", "chat.update", "", form, "token=xoxb-test&text=x", false, 200, missing("channel", "ts")},
		{"history without channel", "POST", "conversations.history", "", form, "token=xoxb-test&limit=10", false, 200, missing("channel")},
		{"replies without ts", "GET", "conversations.replies", "channel=C0001", "", "", true, 200, missing("ts")},
		{"upload url without filename and length", "POST", "files.getUploadURLExternal", "", form, "token=xoxb-test", false, 200, missing("filename", "length")},
		{"upload url of length 0", "POST", "files.getUploadURLExternal", "", form, "token=xoxb-test&filename=a.txt&length=0", false, 200, `{"ok":false,"error":"missing_argument"}`},
		{"complete without files", "POST", "files.completeUploadExternal", "", form, "token=xoxb-test&channel_id=C0001", false, 200, missing("files")},
		{"limit not an integer", "POST", "conversations.history", "", form, "token=xoxb-test&channel=C0001&limit=ten", false, 200, typed("invalid_arguments", "an integer", "limit")},
		{"length not an integer", "POST", "files.getUploadURLExternal", "", form, "token=xoxb-test&filename=a&length=1.5", false, 200, typed("invalid_arguments", "an integer", "length")},
		{"ts not a number", "POST", "conversations.replies", "", form, "token=xoxb-test&channel=C0001&ts=yesterday", false, 200, typed("invalid_arguments", "a number", "ts")},
		{"inclusive not a boolean", "POST", "conversations.history", "", form, "token=xoxb-test&channel=C0001&inclusive=yes", false, 200, typed("invalid_arguments", "a boolean", "inclusive")},
		{"files not an array", "POST", "files.completeUploadExternal", "", form, "token=xoxb-test&files=F1", false, 200, typed("invalid_arguments", "a JSON array", "files")},
		{"blocks not an array", "POST", "chat.postMessage", "", form, "token=xoxb-test&channel=C0001&blocks=%7B%7D", false, 200, typed("invalid_blocks_format", "a JSON array", "blocks")},
		{"metadata not an object", "POST", "chat.update", "", form, "token=xoxb-test&channel=C0001&ts=1.2&metadata=%5B%5D", false, 200, typed("invalid_metadata_format", "a JSON object", "metadata")},
		{"text a JSON number", "POST", "chat.postMessage", "", "application/json", `{"channel":"C0001","text":5}`, true, 200, typed("invalid_arguments", "a string", "text")},
		{"JSON to a method that reads only forms", "POST", "conversations.history", "", "application/json", `{"channel":"C0001"}`, true, 200, missing("channel")},
		{"token in the query string", "POST", "chat.postMessage", "token=xoxb-test", form, "channel=C0001&text=x", false, 200, `{"ok":false,"error":"not_authed"}`},
		{"token in a JSON body", "POST", "chat.postMessage", "", "application/json", `{"token":"xoxb-test","channel":"C0001","text":"x"}`, false, 200, `{"ok":false,"error":"not_authed"}`},
		{"POST body without a content type", "POST", "chat.postMessage", "", "", "channel=C0001", true, 200, `{"ok":false,"error":"missing_post_type"}`},
		{"GET with a body", "GET", "conversations.history", "channel=C0001", form, "limit=1", true, 403, "Forbidden\n"},
		{"PUT", "PUT", "chat.postMessage", "", form, "channel=C0001&text=x", true, 405, "Method Not Allowed\n"},
		{"GET with query arguments", "GET", "conversations.history", "channel=C0001&limit=1", "", "", true, 200, `{"ok":true,"messages":[],"has_more":false,"pin_count":0}`},
		{"an argument the method does not know is ignored", "POST", "conversations.list", "", form, "token=xoxb-test&colour=blue&limit=5", false, 200,
			`{"ok":true,"channels":[{"id":"C0001","name":"alerts","name_normalized":"alerts","is_channel":true,"is_private":false,"is_archived":false,"is_member":true}],"response_metadata":{"next_cursor":""}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := raw(t, s, tc.verb, tc.method, tc.query, tc.contentType, tc.body, tc.bearer)
			if status != tc.status {
				t.Fatalf("HTTP %d %q, want %d", status, body, tc.status)
			}
			if status != http.StatusOK {
				if body != tc.want {
					t.Fatalf("body %q, want %q", body, tc.want)
				}
				return
			}
			var got, want any
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("answer %q: %v", body, err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatalf("want %q: %v", tc.want, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("answer\n got %s\nwant %s", body, tc.want)
			}
		})
	}
	if msgs := s.Messages("C0001"); len(msgs) != 0 {
		t.Fatalf("refused calls were applied:\n%s", s.Dump())
	}
}

// TestCallsRecordHowTheyArrived: a call's verb, content type, arguments and
// their places are kept for tests that hold them to Slack's description.
func TestCallsRecordHowTheyArrived(t *testing.T) {
	s := New(t)
	post(t, client(s, "xoxb-test"), "C0001", slack.MsgOptionText("hi", false))
	raw(t, s, "POST", "chat.postMessage", "unfurl_links=false", "application/json", `{"channel":"C0001","text":"x","mrkdwn":false}`, true)
	calls := s.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d calls recorded, want 2", len(calls))
	}
	form, js := calls[0].Request, calls[1].Request
	if form.HTTPMethod != "POST" || form.ContentType != "application/x-www-form-urlencoded" || form.Bearer {
		t.Errorf("slack-go's post: %+v", form)
	}
	if tok, ok := form.Arg("token"); !ok || tok.In != InForm || tok.Value != Redacted {
		t.Errorf("slack-go sends the token in the form body, kept redacted: %+v", form.Args)
	}
	want := []Arg{{Name: "unfurl_links", Value: "false", In: InQuery},
		{Name: "channel", Value: "C0001", In: InJSON}, {Name: "mrkdwn", Value: "false", In: InJSON, JSON: true}, {Name: "text", Value: "x", In: InJSON}}
	if !js.Bearer || js.ContentType != "application/json" || !reflect.DeepEqual(js.Args, want) {
		t.Errorf("JSON post: %+v\nwant args %+v", js, want)
	}
}

// TestEveryMethodHasARule: the stub serves no method its rules table lacks, nor the reverse.
func TestEveryMethodHasARule(t *testing.T) {
	var served, ruled []string
	for m := range methods {
		served = append(served, m)
	}
	for _, r := range Rules() {
		ruled = append(ruled, r.Name)
	}
	sort.Strings(served)
	if !reflect.DeepEqual(served, ruled) {
		t.Fatalf("methods served %v, rules for %v", served, ruled)
	}
}

func TestConversationsListPages(t *testing.T) {
	s := New(t, WithChannel("C0001", "alerts"), WithChannel("C0002", "#ops"), WithChannel("C0003", "gpu"))
	c := client(s, "xoxb-test")
	params := &slack.GetConversationsParameters{Types: []string{"public_channel", "private_channel"}, ExcludeArchived: true, Limit: 2}
	var names []string
	for range 3 {
		chans, cursor, err := c.GetConversationsContext(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chans {
			names = append(names, ch.ID+"="+ch.Name)
		}
		if cursor == "" {
			break
		}
		params.Cursor = cursor
	}
	if got := strings.Join(names, " "); got != "C0001=alerts C0002=ops C0003=gpu" {
		t.Fatalf("listed %s", got)
	}
	params.Cursor = "bm9wZQ=="
	if _, _, err := c.GetConversationsContext(context.Background(), params); apiErr(err) != "invalid_cursor" {
		t.Errorf("a bad cursor: %v, want invalid_cursor", err)
	}
	if _, _, err := c.GetConversationsContext(context.Background(), &slack.GetConversationsParameters{Types: []string{"dm"}}); apiErr(err) != "invalid_types" {
		t.Errorf("an unknown type: %v, want invalid_types", err)
	}
}
