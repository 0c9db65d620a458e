package slack

import (
	"strings"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/notify"
)

// maxSeenLinks is how many earlier runs the parent's seen-before line links.
const maxSeenLinks = 3

// seenLine is the parent's seen-before line, and links to the latest earlier
// runs' pages when the daemon's external URL is known (Slack markup).
func seenLine(s *notify.SeenBefore, externalURL string) string {
	if s == nil {
		return ""
	}
	line := s.Line()
	if line == "" {
		return ""
	}
	line = esc(line)
	if externalURL == "" {
		return line
	}
	var earlier []string
	for _, r := range s.Earlier {
		if len(earlier) == maxSeenLinks {
			break
		}
		label := r.At.UTC().Format("Mon 15:04")
		if r.Verdict != "" {
			label += " " + r.Verdict
		}
		earlier = append(earlier, "<"+externalURL+"/runs/"+r.ID+"|"+esc(label)+">")
	}
	return line + " — earlier: " + strings.Join(earlier, ", ")
}

// seenBlock shows the seen-before line under the alert's fields; nil for none.
func seenBlock(line string) slack.Block {
	if line == "" {
		return nil
	}
	return slack.NewContextBlock("seen", mrkdwn(clip.Runes(":repeat: "+line, maxField)))
}

// parentOf is the parent run shows: its links and its seen-before line as
// this notifier renders them.
func (n *Notifier) parentOf(run notify.RunInfo, log *zap.Logger) Parent {
	p := ParentFromRun(run, n.links(run, log))
	p.Seen, p.Silenced, p.Profilable = seenLine(run.Seen, n.externalURL), run.Silenced, run.Profilable
	return p
}

// withRepeat adds, under a reply's verdict, the earlier run whose verdict it
// repeats: its page, its verdict's evidence there and its key artifact.
func (n *Notifier) withRepeat(msg Message, r notify.StepReport) Message {
	if r.Repeat == nil || r.Verdict == nil {
		return msg
	}
	line := ":repeat: " + esc(r.Repeat.Line())
	if n.externalURL == "" {
		line += " (run " + code(r.Repeat.Run.ID) + ")"
	} else {
		page := escURL(n.runPageURL(r.Repeat.Run.ID))
		line += " (<" + page + "|run " + esc(r.Repeat.Run.ID) + ">): <" + page + "#verdict|evidence>"
	}
	if l := r.Repeat.EvidenceLink; l != nil && webURL(l.URL) {
		line += " · <" + escURL(l.URL) + "|" + esc(linkName(l.Text())) + ">"
	}
	block := slack.NewContextBlock("repeat", mrkdwn(clip.Runes(line, maxField)))
	for i, b := range msg.Blocks { // right under the verdict it speaks of
		if s, ok := b.(*slack.SectionBlock); ok && s.BlockID == "verdict" {
			msg.Blocks = append(msg.Blocks[:i+1], append([]slack.Block{block}, msg.Blocks[i+1:]...)...)
			return msg
		}
	}
	msg.Blocks = append(msg.Blocks, block)
	return msg
}
