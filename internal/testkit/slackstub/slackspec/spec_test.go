package slackspec

import (
	"slices"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
)

// TestStubRulesMatchTheDescription: the stub's rules table has the methods,
// arguments, types and required arguments of Slack's description with its
// later additions, and JSON bodies exactly where the method reads them.
func TestStubRulesMatchTheDescription(t *testing.T) {
	spec := Load(t)
	for _, rule := range slackstub.Rules() {
		m, ok := spec.Method(rule.Name)
		if !ok {
			t.Errorf("%s: the stub serves a method nobody describes", rule.Name)
			continue
		}
		if rule.JSON != m.JSON() {
			t.Errorf("%s: the stub reads JSON bodies %v; the method reads %v", rule.Name, rule.JSON, m.ContentTypes)
		}
		if !m.Token {
			t.Errorf("%s: the description lists no token", rule.Name)
		}
		stub := map[string]slackstub.ArgRule{}
		for _, a := range rule.Args {
			stub[a.Name] = a
			if want, ok := m.Args[a.Name]; !ok {
				t.Errorf("%s: the stub knows %s, the description does not", rule.Name, a.Name)
			} else if a != want {
				t.Errorf("%s: the stub has %+v, the description %+v", rule.Name, a, want)
			}
		}
		for name := range m.Args {
			if _, ok := stub[name]; !ok {
				t.Errorf("%s: the description has %s, the stub's rule does not", rule.Name, name)
			}
		}
	}
}

// TestLaterAdditionsCiteTheirMethodPage: each addition names the Slack page
// of the method it changes.
func TestLaterAdditionsCiteTheirMethodPage(t *testing.T) {
	for _, a := range Later {
		if a.Doc != "https://docs.slack.dev/reference/methods/"+a.Method {
			t.Errorf("%s cites %s", a.Method, a.Doc)
		}
		if len(a.Args) == 0 {
			t.Errorf("%s adds nothing", a.Method)
		}
	}
}

func form(args ...string) []slackstub.Arg {
	var out []slackstub.Arg
	for i := 0; i < len(args); i += 2 {
		out = append(out, slackstub.Arg{Name: args[i], Value: args[i+1], In: slackstub.InForm})
	}
	return out
}

// TestCheckRefuses: a call as slack-go sends it passes; each way of
// departing from the description is reported.
func TestCheckRefuses(t *testing.T) {
	spec := Load(t)
	ok := slackstub.Request{HTTPMethod: "POST", ContentType: "application/x-www-form-urlencoded", HasBody: true,
		Args: form("token", "xoxb-1", "channel", "C1", "text", "hi", "blocks", `[{"type":"divider"}]`,
			"metadata", `{"event_type":"e","event_payload":{}}`, "unfurl_links", "false", "thread_ts", "1700000000.000100")}
	if bad := spec.Check("chat.postMessage", ok); len(bad) != 0 {
		t.Fatalf("a good post: %v", bad)
	}
	with := func(mod func(*slackstub.Request)) slackstub.Request {
		r := ok
		r.Args = slices.Clone(ok.Args)
		mod(&r)
		return r
	}
	set := func(name, value string) func(*slackstub.Request) {
		return func(r *slackstub.Request) {
			for i := range r.Args {
				if r.Args[i].Name == name {
					r.Args[i].Value = value
				}
			}
		}
	}
	for _, tc := range []struct {
		name, method string
		req          slackstub.Request
		want         string
	}{
		{"unknown method", "chat.postMessages", ok, "neither Slack's description nor a later addition"},
		{"an argument chat.update does not take", "chat.update", ok, "argument unfurl_links=\"false\", which the method does not take"},
		{"an argument of another method", "chat.postMessage", with(func(r *slackstub.Request) { r.Args = append(r.Args, form("ts", "1.2")...) }), "argument ts=\"1.2\", which the method does not take"},
		{"missing required", "chat.postMessage", with(set("channel", "")), "required argument channel missing"},
		{"boolean", "chat.postMessage", with(set("unfurl_links", "no")), "unfurl_links=\"no\" is not boolean"},
		{"JSON array", "chat.postMessage", with(set("blocks", "divider")), "blocks=\"divider\" is not JSON array"},
		{"JSON object", "chat.postMessage", with(set("metadata", "[]")), "metadata=\"[]\" is not JSON object"},
		{"integer", "files.getUploadURLExternal", slackstub.Request{HTTPMethod: "POST", ContentType: "application/x-www-form-urlencoded",
			HasBody: true, Bearer: true, Args: form("filename", "a.png", "length", "12.5")}, "length=\"12.5\" is not integer"},
		{"number", "conversations.replies", slackstub.Request{HTTPMethod: "GET", Bearer: true,
			Args: form("channel", "C1", "ts", "yesterday")}, "ts=\"yesterday\" is not number"},
		{"twice", "chat.postMessage", with(func(r *slackstub.Request) { r.Args = append(r.Args, form("text", "again")...) }), "argument text sent twice"},
		{"token in the query", "chat.postMessage", with(func(r *slackstub.Request) { r.Args[0].In = slackstub.InQuery }), "query string"},
		{"no token", "chat.postMessage", with(func(r *slackstub.Request) { r.Args = r.Args[1:] }), "no token"},
		{"verb", "chat.postMessage", with(func(r *slackstub.Request) { r.HTTPMethod = "PUT" }), "HTTP PUT"},
		{"GET with a body", "chat.postMessage", with(func(r *slackstub.Request) { r.HTTPMethod = "GET" }), "GET with a body"},
		{"JSON to a form-only method", "conversations.history", slackstub.Request{HTTPMethod: "POST", ContentType: "application/json",
			HasBody: true, Bearer: true, Args: []slackstub.Arg{{Name: "channel", Value: "C1", In: slackstub.InJSON}}}, "the method reads [application/x-www-form-urlencoded]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := spec.Check(tc.method, tc.req)
			if !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, tc.want) }) {
				t.Fatalf("%s: %v, want one saying %q", tc.method, bad, tc.want)
			}
		})
	}
}
