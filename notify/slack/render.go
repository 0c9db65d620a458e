package slack

import (
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// Rendering is pure: run events in, Block Kit and fallback text out. Nothing
// here talks to Slack, so golden files pin what the on-call reads.

// Message is one Slack message: Block Kit blocks and the plain-text fallback
// Slack shows in notifications, plus what to upload into the thread with it.
type Message struct {
	Text    string        `json:"text"`
	Blocks  []slack.Block `json:"blocks"`
	Uploads []Upload      `json:"uploads,omitempty"`
}

// Upload is a file to attach to a reply: an artifact read from storage (Key),
// or text the message had to cut (Content).
type Upload struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Key         string `json:"key,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Size        int64  `json:"size,omitempty"`
	Content     string `json:"content,omitempty"`
}

// Parent is what the thread's parent shows. It travels in the parent's
// metadata, so Close re-renders the parent from Slack alone, on any replica.
type Parent struct {
	RunID     string
	Alert     string
	Severity  string
	Instance  string
	Model     string
	Since     time.Time
	Playbooks []string
	Summary   string // the alert's summary annotation
	Resumed   int
	Links     []notify.Link
	// Set by Close.
	Status        vocab.Status // "" while capturing
	Duration      time.Duration
	Verdict       string // "kv-pressure — <first evidence>. <first advice>"
	Also          []string
	Scope         string // "scope: single-instance — only this instance: …" (vocab.ScopeText)
	ResolvedAfter time.Duration
	Resolved      bool
	// AskFeedback adds the "verdict right / wrong" buttons under a verdict.
	// It is the notifier's setting (interactivity configured), not the run's,
	// so it is not kept in the metadata.
	AskFeedback bool
	// AskSilence adds the "Silence…" buttons (notify.slack.actions.silence),
	// the notifier's setting as AskFeedback is.
	AskSilence bool
	// AskProfile adds "Profile again" (notify.slack.actions.profile) when
	// the run is Profilable.
	AskProfile bool
	// Profilable: the run's playbooks have a profile step; kept in the
	// metadata.
	Profilable bool
	// Seen is the seen-before line, Slack markup (seenLine): set at open,
	// kept in the metadata.
	Seen string
	// Silenced says who silenced the alert until when, while it holds.
	Silenced string
}

// ParentFromRun takes what the parent shows from the run; links are the
// alert's source, the dashboard and the run, as the notifier resolved them.
func ParentFromRun(run notify.RunInfo, links []notify.Link) Parent {
	l := run.Alert.Labels
	return Parent{RunID: run.ID, Alert: l["alertname"], Severity: l["severity"], Instance: l["instance"],
		Model: l["model_name"], Since: run.Alert.StartsAt.UTC(), Playbooks: run.Playbooks,
		Summary: clip.Runes(clip.Fold(run.Alert.Annotations["summary"]), 500), Resumed: run.Resumed, Links: links}
}

// Apply folds a Summary into the parent: the verdict, the run's end, the
// alert's resolution. An update carries only what it knows; the rest stays.
func (p Parent) Apply(s notify.Summary) Parent {
	if s.Verdict != nil {
		p.Verdict, p.Also, p.Scope = VerdictLine(s.Verdict), s.Verdict.Contributing, vocab.ScopeText(s.Verdict)
	}
	switch {
	case s.Key == notify.KeyCloseFinished, s.Key == "" && s.Status != "":
		p.Status, p.Duration = s.Status, s.Duration
	case (s.Key == notify.KeyCloseResolved || strings.HasPrefix(s.Key, notify.KeyActionEdit)) && p.Status == "" && s.Status.Finished():
		p.Status, p.Duration = s.Status, s.Duration
	}
	if s.ResolvedAt != nil {
		p.Resolved = true
		if !p.Since.IsZero() && s.ResolvedAt.After(p.Since) {
			p.ResolvedAfter = s.ResolvedAt.Sub(p.Since)
		}
	}
	return p
}

// VerdictLine is the verdict in one line: "kv-pressure — <first evidence
// line>. <first advice>"; a preliminary one says so after its id; one a
// profile refined says the profile's finding instead of the evidence.
func VerdictLine(v *vocab.Verdict) string {
	line := v.ID
	if v.Preliminary {
		line += " (preliminary)"
	}
	if v.Profile != nil { // the profile's finding explains it, not the metrics' first line
		line = clip.Fold(vocab.VerdictText(v))
	} else if len(v.Evidence) > 0 {
		line += " — " + strings.TrimSuffix(clip.Fold(v.Evidence[0]), ".")
	}
	if len(v.Advice) > 0 {
		line += ". " + clip.Fold(v.Advice[0])
	}
	return line
}

// RenderParent renders the parent: the verdict first once there is one, then
// the alert, the status line and the links.
func RenderParent(p Parent) Message {
	title := p.Alert
	if title == "" {
		title = "alert"
	}
	if p.Severity != "" {
		title += " · " + p.Severity
	}
	var blocks []slack.Block
	var text []string
	if p.Verdict != "" {
		id, _, _ := strings.Cut(p.Verdict, " ")
		blocks = append(blocks, header("title", ":dart: "+id+" — "+title))
		body := ":dart: *" + esc(p.Verdict) + "*"
		if len(p.Also) > 0 {
			body += "\n_also: " + esc(strings.Join(p.Also, ", ")) + "_"
		}
		if p.Scope != "" {
			body += "\n_" + esc(clip.Fold(p.Scope)) + "_"
		}
		blocks = append(blocks, section("verdict", clip.Runes(body, maxSection)))
		if p.AskFeedback {
			blocks = append(blocks, feedbackButtons(p.RunID, id))
		}
		text = append(text, p.Verdict)
		if p.Scope != "" {
			text = append(text, p.Scope)
		}
	} else {
		blocks = append(blocks, header("title", ":rotating_light: "+title))
	}
	fields := []*slack.TextBlockObject{}
	add := func(name, value string) {
		if value != "" {
			fields = append(fields, mrkdwn(clip.Runes("*"+name+"*\n"+value, maxField)))
		}
	}
	if p.Instance != "" {
		add("Instance", code(clip.Runes(p.Instance, maxField/2))) // the span closes within the field
	}
	add("Model", esc(p.Model))
	if !p.Since.IsZero() {
		add("Since", slackDate(p.Since))
	}
	add("Playbooks", esc(strings.Join(p.Playbooks, ", ")))
	if len(fields) > 0 {
		blocks = append(blocks, slack.NewSectionBlock(nil, fields, nil, slack.SectionBlockOptionBlockID("alert")))
	}
	if p.Summary != "" {
		blocks = append(blocks, section("summary", clip.Runes(esc(p.Summary), maxSection)))
	}
	if b := seenBlock(p.Seen); b != nil {
		blocks = append(blocks, b)
	}
	if p.Silenced != "" {
		blocks = append(blocks, slack.NewContextBlock("silenced", mrkdwn(clip.Runes(":no_bell: "+esc(p.Silenced), maxField))))
	}
	blocks = append(blocks, slack.NewContextBlock("status", mrkdwn(clip.Runes(p.statusLine(true), maxField))))
	if a := linkButtons(p.Links); a != nil {
		blocks = append(blocks, a)
	}
	if p.AskSilence && !p.Resolved {
		blocks = append(blocks, silenceButtons(p.RunID))
	}
	if p.AskProfile && p.Profilable { // resolved too: a capture once healthy compares as well
		blocks = append(blocks, profileButton(p.RunID))
	}
	text = append(text, fallbackTitle(p), p.statusLine(false))
	return Message{Text: clip.Runes(esc(strings.Join(text, "\n")), maxFallback), Blocks: blocks}
}

// statusLine is "capturing…" or the outcome, the resolution, the run id;
// with markup for the block, without for the fallback text.
func (p Parent) statusLine(markup bool) string {
	e := func(emoji, s string) string {
		if markup {
			return emoji + " " + esc(s)
		}
		return s
	}
	var parts []string
	switch {
	case p.Status == "":
		parts = append(parts, e(":hourglass_flowing_sand:", "capturing…"))
	case p.Duration > 0:
		parts = append(parts, e(statusEmoji(p.Status), string(p.Status)+" after "+fmtDur(p.Duration)))
	default:
		parts = append(parts, e(statusEmoji(p.Status), string(p.Status)))
	}
	if p.Resolved {
		r := "resolved"
		if p.ResolvedAfter > 0 {
			r += " after " + fmtDur(p.ResolvedAfter)
		}
		parts = append(parts, e(":large_green_circle:", r))
	}
	if markup {
		parts = append(parts, "run "+code(p.RunID))
	} else {
		parts = append(parts, "run "+p.RunID)
	}
	if p.Resumed > 0 {
		parts = append(parts, "resumed "+strconv.Itoa(p.Resumed)+"×")
	}
	return strings.Join(parts, " · ")
}

func fallbackTitle(p Parent) string {
	s := p.Alert
	if p.Severity != "" {
		s += " (" + p.Severity + ")"
	}
	if p.Instance != "" {
		s += " on " + p.Instance
	}
	if p.Model != "" {
		s += ", model " + p.Model
	}
	return s
}

// linkButtons turns links into URL buttons (nil for none); a link Slack
// cannot take (too long, not http) is left out.
func linkButtons(links []notify.Link) *slack.ActionBlock {
	var els []slack.BlockElement
	for i, l := range links {
		if !webURL(l.URL) || len(l.URL) > maxURL || len(els) == maxButtons {
			continue
		}
		b := slack.NewButtonBlockElement("link_"+strconv.Itoa(i), l.Name, plainText(clip.Runes(l.Name, maxButtonText))).WithURL(l.URL)
		els = append(els, b)
	}
	if len(els) == 0 {
		return nil
	}
	return slack.NewActionBlock("links", els...)
}

// Feedback buttons' action ids: Slack sends them back to
// POST /hooks/slack/interactions when a reader says whether the verdict is right.
const (
	ActionVerdictRight = "autocapture_verdict_right"
	ActionVerdictWrong = "autocapture_verdict_wrong"
)

// FeedbackValue is a feedback button's value: "<run id>|<verdict id>". It
// names what the reader judged, and holds no secret (Slack echoes it back,
// signed; anyone who sees the message can read it).
func FeedbackValue(runID, verdict string) string { return runID + "|" + verdict }

// ParseFeedbackValue reads FeedbackValue back; verdict ids hold no "|", so
// the last one separates them.
func ParseFeedbackValue(v string) (runID, verdict string, ok bool) {
	i := strings.LastIndexByte(v, '|')
	if i <= 0 || i == len(v)-1 {
		return "", "", false
	}
	return v[:i], v[i+1:], true
}

// feedbackButtons asks, right under the verdict, whether it is right: the
// answers are counted per verdict, so a team sees where triage goes wrong.
func feedbackButtons(runID, verdict string) *slack.ActionBlock {
	v := FeedbackValue(runID, verdict)
	right := slack.NewButtonBlockElement(ActionVerdictRight, v, plainText(":+1: verdict right")).WithStyle(slack.StylePrimary)
	wrong := slack.NewButtonBlockElement(ActionVerdictWrong, v, plainText(":-1: verdict wrong"))
	return slack.NewActionBlock("feedback", right, wrong)
}

// slackDate shows a time in the reader's time zone, RFC 3339 UTC as fallback.
func slackDate(t time.Time) string {
	return "<!date^" + strconv.FormatInt(t.Unix(), 10) + "^{date_short_pretty} {time}|" + t.UTC().Format(time.RFC3339) + ">"
}
