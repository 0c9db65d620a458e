// Package slackspec is Slack's published description of its Web API
// (slackapi/slack-api-specs, web-api/slack_web_openapi_v2_without_examples.json),
// read from $AUTOCAPTURE_FIXTURES, with the few later additions of Slack's
// method documentation laid over it, for tests that hold Web API calls and
// the stub's rules table to it. The description itself is third-party data
// and is not committed here.
package slackspec

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/fixtures"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
)

// File is the description under $AUTOCAPTURE_FIXTURES.
const File = "slack-openapi/slack_web_openapi_v2_without_examples.json"

// Method is one Web API method as Slack describes it.
type Method struct {
	Name         string
	Verb         string   // the verb the description gives; Slack takes GET and POST alike
	ContentTypes []string // the body types it reads
	Token        bool     // the description lists a token argument
	Args         map[string]slackstub.ArgRule
	Doc          string // Slack's documentation of the method
	// Scopes are the OAuth scopes any one of which lets a token call it
	// ("none": no scope needed). The description predates granular bot
	// scopes: its chat:write:bot is today's bot scope chat:write.
	Scopes []string
}

// JSON says whether the method reads application/json bodies.
func (m Method) JSON() bool { return slices.Contains(m.ContentTypes, "application/json") }

// Spec is the description with Later laid over it.
type Spec struct {
	methods map[string]Method
}

// Method returns the method called name, and whether it is described.
func (s *Spec) Method(name string) (Method, bool) {
	m, ok := s.methods[name]
	return m, ok
}

// Load reads the description from $AUTOCAPTURE_FIXTURES (skipping the test
// when it is unset) and lays Later over it, failing the test where an
// addition is no longer later: the description already says the same.
func Load(t testing.TB) *Spec {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Consumes     []string `json:"consumes"`
			ExternalDocs struct {
				URL string `json:"url"`
			} `json:"externalDocs"`
			Parameters []struct {
				Name, In, Type, Description string
				Required                    bool
			} `json:"parameters"`
			Security []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(fixtures.Read(t, File), &doc); err != nil {
		t.Fatalf("%s: %v", File, err)
	}
	s := &Spec{methods: map[string]Method{}}
	for path, ops := range doc.Paths {
		name := strings.TrimPrefix(path, "/")
		if len(ops) != 1 {
			t.Fatalf("%s: %s has %d operations, want one", File, name, len(ops))
		}
		for verb, op := range ops {
			m := Method{Name: name, Verb: strings.ToUpper(verb), ContentTypes: op.Consumes, Doc: op.ExternalDocs.URL,
				Args: map[string]slackstub.ArgRule{}}
			for _, sec := range op.Security {
				for _, sc := range sec["slackAuth"] {
					if sc == "chat:write:bot" {
						sc = "chat:write" // the granular bot scope that replaced it (2020)
					}
					m.Scopes = append(m.Scopes, sc)
				}
			}
			for _, p := range op.Parameters {
				if p.Name == "token" {
					m.Token = true
					continue
				}
				m.Args[p.Name] = slackstub.ArgRule{Name: p.Name, Type: argType(p.Type, p.Description), Required: p.Required}
			}
			s.methods[name] = m
		}
	}
	for _, a := range Later {
		if err := s.apply(a); err != "" {
			t.Fatalf("later addition %s (%s): %s", a.Method, a.Doc, err)
		}
	}
	return s
}

// argType reads a parameter's type; the description gives JSON-encoded
// arrays and objects as strings and says so in prose.
func argType(typ, description string) slackstub.ArgType {
	switch {
	case typ == "string" && strings.Contains(description, "JSON-based array"):
		return slackstub.TypeArray
	case typ == "string" && strings.Contains(description, "JSON object"):
		return slackstub.TypeObject
	}
	return slackstub.ArgType(typ)
}

func (s *Spec) apply(a Addition) string {
	m, described := s.methods[a.Method]
	if a.New != nil {
		if described {
			return "the description has this method now"
		}
		n := *a.New
		n.Name, n.Doc, n.Token = a.Method, a.Doc, true
		n.Args = map[string]slackstub.ArgRule{}
		for _, r := range a.Args {
			n.Args[r.Name] = r
		}
		s.methods[a.Method] = n
		return ""
	}
	if !described {
		return "the description has no such method to add to"
	}
	for _, r := range a.Args {
		if old, ok := m.Args[r.Name]; ok && old == r {
			return "the description already says " + r.Name + " is " + string(r.Type)
		}
		m.Args[r.Name] = r
	}
	return ""
}

// Addition is where Slack's method documentation supersedes the description,
// which predates it: a method added since (New, with every argument its
// page documents), or arguments added to a described method or made
// required there.
type Addition struct {
	Method string
	Doc    string // the method's page, which defines the addition
	New    *Method
	Args   []slackstub.ArgRule
}

func arg(name string, t slackstub.ArgType, required bool) slackstub.ArgRule {
	return slackstub.ArgRule{Name: name, Type: t, Required: required}
}

var postForms = []string{"application/x-www-form-urlencoded", "application/json"}

// Later is the short list of later additions the notifier relies on.
var Later = []Addition{
	// Message metadata (2022): "JSON object with event_type and event_payload fields".
	{Method: "chat.postMessage", Doc: "https://docs.slack.dev/reference/methods/chat.postMessage",
		Args: []slackstub.ArgRule{arg("metadata", slackstub.TypeObject, false)}},
	{Method: "chat.update", Doc: "https://docs.slack.dev/reference/methods/chat.update",
		Args: []slackstub.ArgRule{arg("metadata", slackstub.TypeObject, false)}},
	// Reading metadata back (2022); the docs make channel (and ts) required,
	// as Slack enforces ("[ERROR] missing required field: channel").
	{Method: "conversations.history", Doc: "https://docs.slack.dev/reference/methods/conversations.history",
		Args: []slackstub.ArgRule{arg("include_all_metadata", slackstub.TypeBoolean, false), arg("channel", slackstub.TypeString, true)}},
	{Method: "conversations.replies", Doc: "https://docs.slack.dev/reference/methods/conversations.replies",
		Args: []slackstub.ArgRule{arg("include_all_metadata", slackstub.TypeBoolean, false), arg("channel", slackstub.TypeString, true),
			arg("ts", slackstub.TypeNumber, true)}},
	// The external upload flow (2024; files.upload was shut down 2025-11-12).
	{Method: "files.getUploadURLExternal", Doc: "https://docs.slack.dev/reference/methods/files.getUploadURLExternal",
		New: &Method{Verb: http.MethodPost, ContentTypes: postForms, Scopes: []string{"files:write"}},
		Args: []slackstub.ArgRule{arg("filename", slackstub.TypeString, true), arg("length", slackstub.TypeInteger, true),
			arg("alt_txt", slackstub.TypeString, false), arg("snippet_type", slackstub.TypeString, false)}},
	{Method: "files.completeUploadExternal", Doc: "https://docs.slack.dev/reference/methods/files.completeUploadExternal",
		New: &Method{Verb: http.MethodPost, ContentTypes: postForms, Scopes: []string{"files:write"}},
		Args: []slackstub.ArgRule{arg("files", slackstub.TypeArray, true), arg("blocks", slackstub.TypeArray, false),
			arg("channel_id", slackstub.TypeString, false), arg("channels", slackstub.TypeString, false),
			arg("initial_comment", slackstub.TypeString, false), arg("thread_ts", slackstub.TypeString, false)}},
}
