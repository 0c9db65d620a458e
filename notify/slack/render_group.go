package slack

import (
	"fmt"
	"strings"

	"github.com/slack-go/slack"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// A group's parent (a storm's table, a fleet's instances) and its members'
// compact replies. Slack takes at most 50 blocks and 3000 characters a
// section; a parent with hundreds of lines shows as many as fit in
// maxGroupLines characters and counts the rest by outcome ("… and 120 more:
// 100 overload · 20 capturing"), so the headline and that line together
// always account for every member.
const (
	maxGroupLines   = 8000 // characters of member lines in one parent (of ~12 000 bytes of blocks)
	maxGroupSection = 2800 // characters of member lines per section
	maxMemberStep   = 200  // a step's summary in a compact reply
)

// RenderGroupParent renders a group's parent: the headline with counts by
// verdict, one line per member (instance, model, verdict, status,
// resolution), the lead's run, and for a fleet the lead's links. lead is the
// lead's parent (after Apply), for its alert's name and severity.
func RenderGroupParent(g notify.Group, lead Parent) Message {
	emoji := ":rotating_light:"
	if g.Resolved() {
		emoji = ":large_green_circle:"
	}
	title := g.Alert
	if title == "" {
		title = "alert"
	}
	if lead.Severity != "" {
		title += " · " + lead.Severity
	}
	if g.Kind == notify.GroupFleet {
		title = emoji + " " + title + " — fleet of " + g.Model
	} else {
		title = emoji + " Alert storm — " + fmt.Sprintf("%d × %s", len(g.Members), title)
	}
	headline := g.Headline()
	blocks := []slack.Block{header("title", title), section("headline", clip.Runes("*"+esc(headline)+"*", maxSection))}
	many := severalAlerts(g)
	var cur []string
	curLen, total, shown := 0, 0, 0
	flush := func() {
		if len(cur) > 0 {
			blocks = append(blocks, section(fmt.Sprintf("members-%d", len(blocks)), strings.Join(cur, "\n")))
			cur, curLen = nil, 0
		}
	}
	for _, m := range g.Members {
		l := memberLine(m, many)
		n := len([]rune(l)) + 1
		if total+n > maxGroupLines {
			break
		}
		if curLen+n > maxGroupSection {
			flush()
		}
		cur, curLen, total, shown = append(cur, l), curLen+n, total+n, shown+1
	}
	flush()
	if rest := g.Members[shown:]; len(rest) > 0 {
		more := notify.Group{Members: rest} // the lines left out, each counted (a fleet's headline counts instances)
		var parts []string
		for _, c := range more.Counts() {
			parts = append(parts, fmt.Sprintf("%d %s", c.N, c.What))
		}
		blocks = append(blocks, slack.NewContextBlock("more", mrkdwn(clip.Runes(esc(fmt.Sprintf("… and %d more: %s",
			len(rest), strings.Join(parts, " · "))), maxField))))
	}
	status := fmt.Sprintf("%d runs · lead run `%s`", len(g.Members), esc(g.LeadID))
	blocks = append(blocks, slack.NewContextBlock("status", mrkdwn(clip.Runes(status, maxField))))
	if g.Kind == notify.GroupFleet {
		if a := linkButtons(lead.Links); a != nil {
			blocks = append(blocks, a)
		}
	}
	text := headline
	if g.Kind == notify.GroupFleet {
		text = g.Alert + ": " + headline
	}
	return Message{Text: clip.Runes(esc(text), maxFallback), Blocks: blocks}
}

// memberLine is one member's line: "• `10.0.0.7:8000` llama-70b — :dart:
// *overload* · :white_check_mark: succeeded · :large_green_circle: resolved".
func memberLine(m notify.Member, withAlert bool) string {
	var b strings.Builder
	b.WriteString("• ")
	if withAlert && m.Alert != "" {
		b.WriteString(esc(m.Alert) + " ")
	}
	if m.Instance != "" {
		b.WriteString(code(clip.Runes(m.Instance, 80)) + " ")
	}
	if m.Model != "" {
		b.WriteString(esc(clip.Runes(m.Model, 60)) + " ")
	}
	b.WriteString("—")
	parts := []string{}
	if m.Verdict != "" {
		parts = append(parts, ":dart: *"+esc(m.Verdict)+"*")
	}
	switch m.Status {
	case "", vocab.StatusQueued:
		parts = append(parts, ":hourglass: queued")
	case vocab.StatusRunning:
		parts = append(parts, ":hourglass_flowing_sand: capturing")
	default:
		parts = append(parts, statusEmoji(m.Status)+" "+esc(string(m.Status)))
	}
	if m.Resolved {
		parts = append(parts, ":large_green_circle: resolved")
	}
	b.WriteString(" " + strings.Join(parts, " · "))
	return b.String()
}

// severalAlerts says whether members differ in alertname: then each line
// names its own.
func severalAlerts(g notify.Group) bool {
	for _, m := range g.Members {
		if m.Alert != g.Alert {
			return true
		}
	}
	return false
}

// RenderMemberReply renders a member's one reply in its group's thread: its
// outcome and verdict, then one line per step.
func RenderMemberReply(r notify.MemberReport) Message {
	m := r.Member
	head := ""
	if m.Instance != "" {
		head = code(clip.Runes(m.Instance, 80)) + " "
	}
	if m.Model != "" {
		head += esc(clip.Runes(m.Model, 60)) + " "
	}
	head += "— " + statusEmoji(m.Status) + " *" + esc(string(m.Status)) + "*"
	text := strings.TrimSpace(m.Instance + " " + string(m.Status))
	if r.Duration > 0 {
		head += " after " + fmtDur(r.Duration)
		text += " after " + fmtDur(r.Duration)
	}
	if v := r.Verdict; v != nil {
		head += "\n:dart: *" + esc(clip.Runes(VerdictLine(v), maxWhy)) + "*"
		text += "\n" + VerdictLine(v)
	}
	if why := clip.Runes(clip.Fold(r.Reason), maxWhy); why != "" {
		head += "\n_" + esc(why) + "_"
	}
	lines := []string{head}
	for _, st := range r.Steps {
		l := "• " + statusEmoji(st.Status) + " *" + esc(st.StepID) + "* (" + esc(st.Kind) + ") " + esc(string(st.Status))
		if st.Status == vocab.StatusSucceeded || st.Status == vocab.StatusFailed {
			l += " in " + fmtDur(st.Duration)
		}
		why := clip.Fold(st.Reason)
		if e := clip.Fold(st.Error); e != "" {
			why = strings.TrimPrefix(why+": "+e, ": ")
		}
		if s := clip.Fold(st.Summary); s != "" {
			l += " — " + esc(clip.Runes(s, maxMemberStep))
		} else if why != "" {
			l += ": " + esc(clip.Runes(why, maxMemberStep))
		}
		lines = append(lines, l)
	}
	out := lines[0]
	for i, l := range lines[1:] {
		if len([]rune(out))+len([]rune(l))+1 > maxSection-40 {
			out += fmt.Sprintf("\n… %d more steps", len(lines)-1-i)
			break
		}
		out += "\n" + l
	}
	return Message{Text: clip.Runes(esc(text), maxFallback), Blocks: []slack.Block{section("member", clip.Runes(out, maxSection))}}
}
