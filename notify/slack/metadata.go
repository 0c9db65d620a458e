package slack

import (
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// EventType marks every message this notifier posts: its metadata carries the
// run id and the operation's key, so a retry can ask Slack what was posted.
// Any app in the workspace can read metadata: it holds no secret.
const EventType = "autocapture_run"

// metadata is one message's metadata: run id, key, and for the parent what it
// shows (flat strings, as Slack's event_payload takes them).
func metadata(runID, key string, extra map[string]any) slack.SlackMetadata {
	p := map[string]any{"run_id": runID, "key": key}
	for k, v := range extra {
		p[k] = v
	}
	return slack.SlackMetadata{EventType: EventType, EventPayload: p}
}

// matches says whether a message is this run's message for key.
func matches(m slack.Message, runID, key string) bool {
	md := m.Metadata
	return md.EventType == EventType && str(md.EventPayload, "run_id") == runID && str(md.EventPayload, "key") == key
}

func str(p map[string]any, k string) string {
	s, _ := p[k].(string)
	return s
}

// parentPayload is what the parent's metadata keeps of the parent, so Close
// re-renders it on any replica, after any restart.
func parentPayload(p Parent) map[string]any {
	m := map[string]any{
		"alert": p.Alert, "severity": p.Severity, "instance": p.Instance, "model": p.Model,
		"playbooks": strings.Join(p.Playbooks, ","), "summary": p.Summary,
		"status": string(p.Status), "verdict": p.Verdict, "also": strings.Join(p.Also, ","),
		"scope": p.Scope, "seen": p.Seen, "silenced": p.Silenced,
	}
	if !p.Since.IsZero() {
		m["since"] = p.Since.UTC().Format(time.RFC3339)
	}
	if p.Resumed > 0 {
		m["resumed"] = strconv.Itoa(p.Resumed)
	}
	if p.Profilable {
		m["profilable"] = "1"
	}
	if p.Duration > 0 {
		m["duration"] = p.Duration.String()
	}
	if p.Resolved {
		m["resolved_after"] = p.ResolvedAfter.String()
	}
	for i, l := range p.Links {
		u := l.URL
		if l.Name == RunPageLink { // its token stays out: metadata holds no secret (Close signs afresh)
			u, _, _ = strings.Cut(u, "?")
		}
		m["link"+strconv.Itoa(i)] = l.Name + "\n" + u
	}
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	return m
}

// parentFromPayload reads parentPayload back.
func parentFromPayload(runID string, m map[string]any) Parent {
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	p := Parent{RunID: runID, Alert: str(m, "alert"), Severity: str(m, "severity"), Instance: str(m, "instance"),
		Model: str(m, "model"), Playbooks: split(str(m, "playbooks")), Summary: str(m, "summary"),
		Status: vocab.Status(str(m, "status")), Verdict: str(m, "verdict"), Also: split(str(m, "also")), Scope: str(m, "scope"), Seen: str(m, "seen"),
		Silenced: str(m, "silenced")}
	p.Since, _ = time.Parse(time.RFC3339, str(m, "since"))
	p.Resumed, _ = strconv.Atoi(str(m, "resumed"))
	p.Profilable = str(m, "profilable") == "1"
	p.Duration, _ = time.ParseDuration(str(m, "duration"))
	if r, ok := m["resolved_after"].(string); ok {
		p.Resolved = true
		p.ResolvedAfter, _ = time.ParseDuration(r)
	}
	for i := 0; ; i++ {
		l, ok := m["link"+strconv.Itoa(i)].(string)
		if !ok {
			break
		}
		name, u, _ := strings.Cut(l, "\n")
		p.Links = append(p.Links, notify.Link{Name: name, URL: u})
	}
	return p
}
