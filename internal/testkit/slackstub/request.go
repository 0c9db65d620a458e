package slackstub

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// Where an argument arrived.
const (
	InQuery = "query" // the URL's query string
	InForm  = "form"  // an application/x-www-form-urlencoded or multipart/form-data body
	InJSON  = "json"  // an application/json body
)

// Arg is one argument of a request as it arrived.
type Arg struct {
	Name  string
	Value string // as sent; in a JSON body, a value that is not a string is its JSON text
	In    string // InQuery, InForm or InJSON
	// JSON is set when a JSON body gave the value as a number, boolean,
	// array or object rather than a string.
	JSON bool
}

// Request is how a call arrived, recorded so tests can hold it to Slack's
// published description of the method.
type Request struct {
	HTTPMethod  string // GET, POST, …
	ContentType string // the body's media type without parameters; "" without a Content-Type
	HasBody     bool
	Bearer      bool  // the token came in an Authorization: Bearer header
	Args        []Arg // every argument by place then name; a token's value is Redacted
}

// Redacted stands for a token's value in a recorded Request: tests that
// search what the stub kept for secrets must not find it there.
const Redacted = "<redacted>"

// Arg returns the first argument called name, and whether there is one.
func (r Request) Arg(name string) (Arg, bool) {
	for _, a := range r.Args {
		if a.Name == name {
			return a, true
		}
	}
	return Arg{}, false
}

// maxBody bounds a Web API request body (uploads go to /upload, not here).
const maxBody = 8 << 20

// readRequest reads a Web API call: the record of how it arrived, its
// arguments as the method sees them, and the token. Slack reads arguments
// from the query string and a POST body alike; it takes the token from an
// Authorization header or a form body, never from the query string (refused
// for apps created after 2021-02-24:
// https://docs.slack.dev/changelog/2020-11-no-more-tokens-in-querystrings-for-newly-created-apps)
// and, with a JSON body, only from the header.
func readRequest(r *http.Request) (Request, url.Values, string, *apiError) {
	req := Request{HTTPMethod: r.Method}
	tok, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	req.Bearer = bearer && tok != ""
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return req, nil, "", errf("request_timeout", err.Error())
	}
	req.HasBody = len(body) > 0
	mt, ps, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	req.ContentType = mt
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return req, nil, "", errf("invalid_arg_name", err.Error())
	}
	var bodyArgs []Arg
	var aerr *apiError
	if req.HasBody && r.Method == http.MethodPost {
		bodyArgs, aerr = readBody(mt, ps["boundary"], body)
	}
	req.Args = append(sortedArgs(query, InQuery), bodyArgs...)
	p := url.Values{}
	for _, a := range bodyArgs { // the body first, as net/http's Form has it
		p.Add(a.Name, a.Value)
	}
	for _, a := range sortedArgs(query, InQuery) {
		if a.Name != "token" {
			p.Add(a.Name, a.Value)
		}
	}
	if !req.Bearer {
		tok = ""
		for _, a := range bodyArgs {
			if a.Name == "token" && a.In == InForm {
				tok = a.Value
				break
			}
		}
	}
	p.Del("token")
	for i, a := range req.Args {
		if a.Name == "token" && a.Value != "" {
			req.Args[i].Value = Redacted
		}
	}
	return req, p, tok, aerr
}

// readBody reads a POST body's arguments by its media type.
func readBody(mt, boundary string, body []byte) ([]Arg, *apiError) {
	switch mt {
	case "application/x-www-form-urlencoded":
		v, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errf("invalid_form_data", err.Error())
		}
		return sortedArgs(v, InForm), nil
	case "multipart/form-data":
		return multipartArgs(boundary, body)
	case "application/json":
		return jsonArgs(body)
	case "":
		return nil, errf("missing_post_type")
	default:
		return nil, errf("invalid_post_type")
	}
}

func multipartArgs(boundary string, body []byte) ([]Arg, *apiError) {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	v := url.Values{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return sortedArgs(v, InForm), nil
		}
		if err != nil {
			return nil, errf("invalid_form_data", err.Error())
		}
		b, err := io.ReadAll(part)
		if err != nil {
			return nil, errf("invalid_form_data", err.Error())
		}
		v.Add(part.FormName(), string(b))
	}
}

func jsonArgs(body []byte) ([]Arg, *apiError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, errf("invalid_json", err.Error())
	}
	var out []Arg
	for k, raw := range m {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out = append(out, Arg{Name: k, Value: s, In: InJSON})
		} else {
			out = append(out, Arg{Name: k, Value: string(raw), In: InJSON, JSON: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func sortedArgs(v url.Values, in string) []Arg {
	var out []Arg
	for k, vs := range v {
		for _, x := range vs {
			out = append(out, Arg{Name: k, Value: x, In: in})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
