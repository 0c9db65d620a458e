package slackstub

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// ArgType is how Slack reads an argument's value.
type ArgType string

// The argument types of Slack's Web API description; an array or object
// travels JSON-encoded (a string in a form, either in a JSON body).
const (
	TypeString  ArgType = "string"
	TypeInteger ArgType = "integer"
	TypeNumber  ArgType = "number"
	TypeBoolean ArgType = "boolean"
	TypeArray   ArgType = "JSON array"
	TypeObject  ArgType = "JSON object"
)

// ArgRule is one argument a method takes.
type ArgRule struct {
	Name     string
	Type     ArgType
	Required bool
}

// MethodRule is what the stub holds a call of one method to before serving it.
type MethodRule struct {
	Name string
	JSON bool // the method reads application/json bodies besides forms
	Args []ArgRule
}

// ruleText is the stub's table: for each method it serves, the arguments of
// Slack's published OpenAPI description (slackapi/slack-api-specs,
// web-api/slack_web_openapi_v2.json) and the later additions of Slack's
// method docs (internal/slackstub/slackspec.Later), token aside (auth
// checks it). slackspec's fixture test holds it to both, so they cannot
// drift. An argument is name[:type][!]: type int, num, bool, [] (JSON
// array) or {} (JSON object), string by default; ! marks it required.
var ruleText = []struct {
	method string
	json   bool
	args   string
}{
	{"auth.test", true, ""},
	{"chat.postMessage", true, "channel! as_user attachments:[] blocks:[] icon_emoji icon_url link_names:bool " +
		"metadata:{} mrkdwn:bool parse reply_broadcast:bool text thread_ts unfurl_links:bool unfurl_media:bool username"},
	{"chat.postEphemeral", true, "channel! user! as_user:bool attachments:[] blocks:[] icon_emoji icon_url link_names:bool " +
		"parse text thread_ts username"},
	{"usergroups.users.list", false, "usergroup! include_disabled:bool"},
	{"chat.update", true, "channel! ts! as_user attachments:[] blocks:[] link_names metadata:{} parse text"},
	{"conversations.history", false, "channel! cursor include_all_metadata:bool inclusive:bool latest:num limit:int oldest:num"},
	{"conversations.list", false, "cursor exclude_archived:bool limit:int types"},
	{"conversations.replies", false, "channel! ts:num! cursor include_all_metadata:bool inclusive:bool latest:num limit:int oldest:num"},
	{"files.completeUploadExternal", true, "files:[]! blocks:[] channel_id channels initial_comment thread_ts"},
	{"files.getUploadURLExternal", true, "filename! length:int! alt_txt snippet_type"},
}

var rules = parseRules()

func parseRules() map[string]MethodRule {
	types := map[string]ArgType{"": TypeString, "int": TypeInteger, "num": TypeNumber, "bool": TypeBoolean, "[]": TypeArray, "{}": TypeObject}
	out := map[string]MethodRule{}
	for _, r := range ruleText {
		m := MethodRule{Name: r.method, JSON: r.json}
		for _, f := range strings.Fields(r.args) {
			f, req := strings.CutSuffix(f, "!")
			name, typ, _ := strings.Cut(f, ":")
			t, ok := types[typ]
			if !ok {
				panic("slackstub: rule " + r.method + " " + f + ": unknown type")
			}
			m.Args = append(m.Args, ArgRule{Name: name, Type: t, Required: req})
		}
		out[r.method] = m
	}
	return out
}

// Rules returns the stub's table, by method name.
func Rules() []MethodRule {
	var out []MethodRule
	for _, m := range rules {
		out = append(out, MethodRule{Name: m.Name, JSON: m.JSON, Args: append([]ArgRule(nil), m.Args...)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (m MethodRule) arg(name string) (ArgRule, bool) {
	for _, a := range m.Args {
		if a.Name == name {
			return a, true
		}
	}
	return ArgRule{}, false
}

// refuseHTTP is the HTTP status for a call Slack refuses before reading it,
// or 0. Slack takes arguments by GET or POST
// (https://docs.slack.dev/apis/web-api); a GET or HEAD with a body is
// answered 403 from 2027-02-17
// (https://docs.slack.dev/changelog/2026-11-get-head-requests-with-body).
// What Slack answers to other verbs is not documented: the stub says 405.
func refuseHTTP(req Request) int {
	switch req.HTTPMethod {
	case http.MethodGet, http.MethodHead:
		if req.HasBody {
			return http.StatusForbidden
		}
		return 0
	case http.MethodPost:
		return 0
	}
	return http.StatusMethodNotAllowed
}

// badType names the error a wrongly typed argument gets where Slack's docs
// list one for it (chat.postMessage, chat.update); any other is invalid_arguments.
var badType = map[string]string{"blocks": "invalid_blocks_format", "attachments": "invalid_attachments",
	"metadata": "invalid_metadata_format"}

// check holds a call's arguments to the method's rule, as Slack's schema
// check does: each required one missing or empty is named in an
// invalid_arguments answer ("[ERROR] missing required field: channel"), and a
// value of the wrong type is refused ("[ERROR] must be an integer
// [json-pointer:/limit]"). Arguments the rule does not know are ignored, as
// Slack ignores them; a JSON body to a method that reads only forms is not
// read. It returns the arguments the method sees.
func (m MethodRule) check(req Request) (url.Values, *apiError) {
	p := url.Values{}
	var args []Arg
	for _, a := range req.Args {
		if a.Name == "token" || (a.In == InJSON && !m.JSON) {
			continue
		}
		args = append(args, a)
		p.Add(a.Name, a.Value)
	}
	var missing []string
	for _, a := range m.Args {
		if a.Required && p.Get(a.Name) == "" {
			missing = append(missing, "[ERROR] missing required field: "+a.Name)
		}
	}
	if len(missing) > 0 {
		return nil, errf("invalid_arguments", missing...)
	}
	for _, a := range args {
		r, known := m.arg(a.Name)
		if !known || (a.Value == "" && !a.JSON) || r.Type.accepts(a) {
			continue
		}
		code := badType[a.Name]
		if code == "" {
			code = "invalid_arguments"
		}
		return nil, errf(code, fmt.Sprintf("[ERROR] must be %s [json-pointer:/%s]", r.Type.article(), a.Name))
	}
	return p, nil
}

var (
	integer = regexp.MustCompile(`^-?[0-9]+$`)
	number  = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)
)

// accepts says whether a's value reads as t.
func (t ArgType) accepts(a Arg) bool {
	switch t {
	case TypeString:
		return !a.JSON
	case TypeInteger:
		return integer.MatchString(a.Value)
	case TypeNumber:
		return number.MatchString(a.Value)
	case TypeBoolean:
		return a.Value == "true" || a.Value == "false" || (!a.JSON && (a.Value == "1" || a.Value == "0"))
	case TypeArray:
		var v []json.RawMessage
		return json.Unmarshal([]byte(a.Value), &v) == nil
	case TypeObject:
		var v map[string]json.RawMessage
		return json.Unmarshal([]byte(a.Value), &v) == nil
	}
	return false
}

func (t ArgType) article() string {
	if t == TypeInteger {
		return "an integer"
	}
	return "a " + string(t)
}
