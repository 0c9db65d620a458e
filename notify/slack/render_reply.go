package slack

import (
	"fmt"
	"strings"

	"github.com/slack-go/slack"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// maxWhy bounds a failure's reason and error in a reply: one line, the whole
// text in the attached file.
const maxWhy = 300

// RenderReply renders one finished step: a status line, the step's findings
// summary, why it failed, was skipped or cancelled (one line), the verdict
// with its evidence and advice when the step reached one, its links, and
// its files to upload. Text past Slack's limits is cut, and the whole of it
// attached as <step>-full.txt.
func RenderReply(r notify.StepReport) Message {
	status := r.Status
	if status == vocab.StatusNotConfigured {
		status = "not configured" // in words, as on every surface
	}
	raw := fmt.Sprintf("%s (%s, tier %s) %s", r.StepID, r.Kind, r.Tier, status)
	if r.Status == vocab.StatusSucceeded || r.Status == vocab.StatusFailed {
		raw += " in " + fmtDur(r.Duration)
	}
	head := statusEmoji(r.Status) + " *" + esc(r.StepID) + "*" + esc(strings.TrimPrefix(raw, r.StepID))
	why := clip.Fold(r.Reason)
	if e := clip.Fold(r.Error); e != "" {
		why = strings.TrimPrefix(why+": "+e, ": ")
	}
	cut := false
	body := head
	if why != "" {
		short := clip.Runes(why, maxWhy)
		cut = cut || short != why
		if r.Status == vocab.StatusFailed {
			body += "\n*why*: " + esc(short)
		} else {
			body = head + ": " + esc(short)
		}
	}
	if r.Summary != "" {
		room := maxSection - len([]rune(body)) - 1
		s := summaryMarkup(r.Kind, clip.Runes(r.Summary, room-50))
		cut = cut || clip.Runes(r.Summary, room-50) != r.Summary
		body += "\n" + s
	}
	blocks := []slack.Block{section("step", clip.Runes(body, maxSection))}
	if r.Verdict != nil { // triage's reply says the whole verdict where it was reached
		blocks = append(blocks, section("verdict", verdictDetail(r.Verdict)))
	}
	linkText, dropped := linkLine(r.Links)
	if linkText != "" {
		blocks = append(blocks, slack.NewContextBlock("links", mrkdwn(linkText)))
	}
	cut = cut || dropped > 0
	msg := Message{Blocks: blocks}
	fallback := raw
	if why != "" {
		fallback += ": " + clip.Runes(why, maxWhy)
	}
	if r.Summary != "" {
		fallback += " — " + clip.Fold(r.Summary)
	}
	msg.Text = clip.Runes(esc(fallback), maxFallback)
	for _, f := range r.Files {
		msg.Uploads = append(msg.Uploads, Upload{Name: f.Name, Title: fileTitle(r, f.Name), Key: f.Key, ContentType: f.ContentType, Size: f.Size})
	}
	if cut {
		name := safeName(r.StepID) + "-full.txt"
		msg.Uploads = append(msg.Uploads, Upload{Name: name, Title: fileTitle(r, name), ContentType: "text/plain", Content: fullText(r)})
	}
	return msg
}

// fileTitle names an upload so a retry can tell it is already in the thread.
func fileTitle(r notify.StepReport, name string) string {
	return strings.TrimPrefix(r.Key, "step/") + " · " + name
}

// summaryMarkup emphasises what a reader looks for first: triage's verdict.
func summaryMarkup(kind, s string) string {
	if kind == "triage" {
		for _, id := range vocab.Verdicts {
			if rest, ok := strings.CutPrefix(s, id); ok && (rest == "" || rest[0] == ' ' || rest[0] == ':') {
				return ":stethoscope: *" + id + "*" + esc(rest)
			}
		}
	}
	return esc(s)
}

// linkLine shows links in one line, as many as fit; dropped counts the rest.
// Links Slack cannot open (file://, a local store) show as their path.
func linkLine(links []notify.Link) (string, int) {
	var parts []string
	n := 0
	for i, l := range links {
		var p string
		if l.Pending {
			p = ":hourglass_flowing_sand: " + esc(l.Name) + " _(" + notify.PendingNote + ")_"
		} else if webURL(l.URL) {
			p = "<" + escURL(l.URL) + "|" + esc(linkName(l.Text())) + ">"
		} else {
			p = esc(l.Text()) + ": " + code(l.URL)
		}
		if n+len([]rune(p))+3 > maxField-40 {
			more := fmt.Sprintf("and %d more", len(links)-i)
			parts = append(parts, more)
			return ":link: " + strings.Join(parts, " · "), len(links) - i
		}
		n += len([]rune(p)) + 3
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "", 0
	}
	return ":link: " + strings.Join(parts, " · "), 0
}

func linkName(n string) string { return linkNameReplacer.Replace(n) }

var linkNameReplacer = strings.NewReplacer("|", "¦", ">", "›")

// fullText is a step's whole report, for the file attached when it was cut.
func fullText(r notify.StepReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %s (%s, tier %s) %s in %s\n", r.StepID, r.Kind, r.Tier, r.Status, fmtDur(r.Duration))
	if r.Summary != "" {
		fmt.Fprintf(&b, "\n%s\n", r.Summary)
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, "\nreason: %s\n", r.Reason)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "\nerror: %s\n", r.Error)
	}
	if len(r.Links) > 0 {
		b.WriteString("\nlinks:\n")
		for _, l := range r.Links {
			if l.Pending {
				fmt.Fprintf(&b, "  %s: %s\n", l.Name, notify.PendingNote)
				continue
			}
			fmt.Fprintf(&b, "  %s: %s\n", l.Text(), l.URL)
		}
	}
	return b.String()
}

// RenderCloseReply is the reply that closes a run (close/finished) or marks
// its alert resolved (close/resolved): the outcome, then the verdict with all
// its evidence and advice. p is the parent after Apply.
func RenderCloseReply(p Parent, s notify.Summary) Message {
	var head, text string
	if s.Key == notify.KeyCloseResolved {
		text = "The alert resolved"
		if p.ResolvedAfter > 0 {
			text += " after " + fmtDur(p.ResolvedAfter)
		}
		if !s.Status.Finished() {
			text += "; the run goes on until its capture ends"
		}
		head = ":large_green_circle: " + esc(text)
	} else {
		text = "Run " + string(s.Status)
		head = statusEmoji(s.Status) + " Run *" + esc(string(s.Status)) + "*"
		if s.Duration > 0 {
			text += " after " + fmtDur(s.Duration)
			head += " after " + fmtDur(s.Duration)
		}
	}
	if why := clip.Runes(clip.Fold(s.Reason), maxWhy); why != "" {
		head += "\n_" + esc(why) + "_"
		text += "\n" + why
	}
	blocks := []slack.Block{section("outcome", clip.Runes(head, maxSection))}
	if v := s.Verdict; v != nil && s.Key != notify.KeyCloseResolved {
		blocks = append(blocks, section("verdict", verdictDetail(v)))
		text += "\n" + VerdictLine(v)
	}
	return Message{Text: clip.Runes(esc(text), maxFallback), Blocks: blocks}
}

// verdictDetail lists the verdict's evidence and advice, as many lines as fit.
func verdictDetail(v *vocab.Verdict) string {
	s := ":stethoscope: *Verdict: " + esc(v.ID) + "*"
	if len(v.Contributing) > 0 {
		s += " (also " + esc(strings.Join(v.Contributing, ", ")) + ")"
	}
	lines := []string{s}
	if sc := vocab.ScopeText(v); sc != "" {
		lines = append(lines, "_"+esc(clip.Fold(sc))+"_")
	}
	if v.Profile != nil {
		lines = append(lines, "• "+esc(clip.Fold(v.Profile.Text())))
	}
	for _, e := range vocab.EvidenceBesideScope(v) { // the scope is said once, above
		lines = append(lines, "• "+esc(clip.Fold(e)))
	}
	for _, a := range vocab.AllAdvice(v) {
		lines = append(lines, "→ "+esc(clip.Fold(a)))
	}
	out := lines[0]
	for i, l := range lines[1:] {
		if len([]rune(out))+len([]rune(l))+1 > maxSection-40 {
			return out + fmt.Sprintf("\n… %d more lines", len(lines)-1-i)
		}
		out += "\n" + l
	}
	return out
}

// shown says whether a reply is posted at all: a skipped step's only with
// post_skipped; a notice about the run (a resume, a cooldown repeat) always,
// whatever status it carries.
func shown(r notify.StepReport, postSkipped bool) bool {
	return postSkipped || r.Notice != "" || r.Status != vocab.StatusSkipped
}

// RenderNotice renders a note about the run itself (a resume, late uploads
// landing): the notice as its one line, the summary under it, the links; no
// step header.
func RenderNotice(r notify.StepReport) Message {
	body := noticeEmoji(r) + " " + esc(clip.Fold(r.Notice))
	fallback := clip.Fold(r.Notice)
	if r.Summary != "" {
		body += "\n" + esc(r.Summary)
		fallback += " — " + clip.Fold(r.Summary)
	}
	blocks := []slack.Block{section("notice", clip.Runes(body, maxSection))}
	if linkText, _ := linkLine(r.Links); linkText != "" {
		blocks = append(blocks, slack.NewContextBlock("links", mrkdwn(linkText)))
	}
	if b := replyButtons(r.Buttons); b != nil {
		blocks = append(blocks, b)
	}
	return Message{Text: clip.Runes(esc(fallback), maxFallback), Blocks: blocks}
}

// RenderVerdictChange renders the reply saying the refined verdict differs
// from the preliminary one the parent showed first: one line, the change.
func RenderVerdictChange(r notify.StepReport) Message {
	body := ":arrows_counterclockwise: *verdict changed* — " + esc(clip.Fold(r.Change))
	return Message{Text: clip.Runes(esc("verdict changed — "+clip.Fold(r.Change)), maxFallback),
		Blocks: []slack.Block{section("verdict-change", clip.Runes(body, maxSection))}}
}
