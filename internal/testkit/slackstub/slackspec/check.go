package slackspec

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
)

// Check holds one call, as the stub recorded it, to the method's
// description and returns what Slack's description or docs refuse, one line
// each: a method nobody describes; a verb Slack does not take (it takes GET
// with the arguments in the query string and POST with them in the body or
// the query: https://docs.slack.dev/apis/web-api), a GET with a body (HTTP
// 403 from 2027-02-17), a POST body of a type the method does not read; the
// token missing or where Slack does not read it (it takes an Authorization:
// Bearer header or a form field, never the query string, and with a JSON
// body only the header); an argument the method does not take, sent twice,
// of the wrong type, or a required one missing.
func (s *Spec) Check(method string, r slackstub.Request) []string {
	m, ok := s.methods[method]
	if !ok {
		return []string{method + ": neither Slack's description nor a later addition has this method"}
	}
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, method+": "+fmt.Sprintf(format, args...)) }
	switch r.HTTPMethod {
	case http.MethodGet:
		if r.HasBody {
			add("GET with a body (Slack answers those 403 from 2027-02-17)")
		}
	case http.MethodPost:
		if r.HasBody && !slices.Contains(m.ContentTypes, r.ContentType) {
			add("a %q body; the method reads %v", r.ContentType, m.ContentTypes)
		}
	default:
		add("HTTP %s; Slack's Web API takes GET or POST", r.HTTPMethod)
	}
	bodyToken := false
	for _, a := range r.Args {
		if a.Name != "token" {
			continue
		}
		switch a.In {
		case slackstub.InQuery:
			add("the token in the URL's query string, which Slack refuses for apps made since 2021-02-24")
		case slackstub.InJSON:
			add("the token in a JSON body, where Slack does not read it (only an Authorization header)")
		default:
			bodyToken = true
		}
	}
	if !r.Bearer && !bodyToken {
		add("no token (the description requires one: an Authorization: Bearer header or a token form field)")
	}
	seen := map[string]bool{}
	for _, a := range r.Args {
		if a.Name == "token" {
			continue
		}
		rule, known := m.Args[a.Name]
		switch {
		case !known:
			add("argument %s=%q, which the method does not take", a.Name, a.Value)
		case seen[a.Name]:
			add("argument %s sent twice", a.Name)
		case !is(rule.Type, a):
			add("argument %s=%q is not %s", a.Name, a.Value, rule.Type)
		}
		seen[a.Name] = true
	}
	for _, rule := range m.Args {
		if a, ok := r.Arg(rule.Name); rule.Required && (!ok || (a.Value == "" && !a.JSON)) {
			add("required argument %s missing", rule.Name)
		}
	}
	slices.Sort(bad)
	return bad
}

// is says whether a's value is of type t, as the description means it.
func is(t slackstub.ArgType, a slackstub.Arg) bool {
	v := strings.TrimSpace(a.Value)
	switch t {
	case slackstub.TypeString:
		return !a.JSON
	case slackstub.TypeInteger:
		_, err := strconv.ParseInt(v, 10, 64)
		return err == nil && v == a.Value
	case slackstub.TypeNumber:
		f, err := strconv.ParseFloat(v, 64)
		return err == nil && v == a.Value && !math.IsInf(f, 0) && !math.IsNaN(f) && !strings.ContainsAny(v, "xXpP_")
	case slackstub.TypeBoolean:
		return slices.Contains([]string{"true", "false", "1", "0"}, v) && (!a.JSON || v == "true" || v == "false")
	case slackstub.TypeArray:
		return json.Valid([]byte(v)) && strings.HasPrefix(v, "[")
	case slackstub.TypeObject:
		return json.Valid([]byte(v)) && strings.HasPrefix(v, "{")
	}
	return false
}
