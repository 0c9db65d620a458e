package slack

import (
	"strings"

	"github.com/slack-go/slack"

	"github.com/autocapture/autocapture/notify"
)

// The buttons that act from the thread: "Silence…" on the parent (a silence
// in Alertmanager for a while, or until the alert resolves) and "Unsilence"
// under the reply that reports one. Their values name a run or an action
// and hold no secret: Slack echoes them back, signed.
const (
	actionSilencePrefix = "autocapture_silence_"
	// ActionUnsilence expires the silence of the action its value names.
	ActionUnsilence = "autocapture_unsilence"
	// ActionProfileAgain takes the profile of the run its value names again.
	ActionProfileAgain = "autocapture_profile_again"
)

// SilenceChoices are the silence lengths the parent offers, in order, as
// the action ids' suffixes; "resolved" lasts until the run's alert resolves.
var SilenceChoices = []struct{ Choice, Text string }{
	{"1h", "1 h"}, {"4h", "4 h"}, {"24h", "24 h"}, {"resolved", "until resolved"},
}

// SilenceAction is the action id of the "Silence" button for choice.
func SilenceAction(choice string) string { return actionSilencePrefix + choice }

// silenceChoice reads a silence button's action id back.
func silenceChoice(actionID string) (string, bool) {
	c, ok := strings.CutPrefix(actionID, actionSilencePrefix)
	if !ok {
		return "", false
	}
	for _, s := range SilenceChoices {
		if s.Choice == c {
			return c, true
		}
	}
	return "", false
}

// silenceButtons offers a silence of the run's alert for each choice.
func silenceButtons(runID string) *slack.ActionBlock {
	els := []slack.BlockElement{}
	for i, c := range SilenceChoices {
		text := c.Text
		if i == 0 {
			text = ":no_bell: Silence " + text
		}
		els = append(els, slack.NewButtonBlockElement(SilenceAction(c.Choice), runID, plainText(text)))
	}
	return slack.NewActionBlock("silence", els...)
}

// profileButton offers to take the run's profile again.
func profileButton(runID string) *slack.ActionBlock {
	return slack.NewActionBlock("profile", slack.NewButtonBlockElement(ActionProfileAgain, runID, plainText(":mag: Profile again")))
}

// replyButtons draws a reply's buttons (nil for none, or none this
// notifier knows).
func replyButtons(bs []notify.Button) *slack.ActionBlock {
	var els []slack.BlockElement
	for _, b := range bs {
		if b.Kind == notify.ButtonUnsilence && b.Value != "" && len(b.Value) <= maxButtonValue {
			els = append(els, slack.NewButtonBlockElement(ActionUnsilence, b.Value, plainText(":bell: "+b.Text)).WithStyle(slack.StyleDanger))
		}
	}
	if len(els) == 0 {
		return nil
	}
	return slack.NewActionBlock("reply-actions", els...)
}

// maxButtonValue is Slack's limit on a button's value.
const maxButtonValue = 2000

// noticeEmoji leads a notice: a silence's reply shows a bell.
func noticeEmoji(r notify.StepReport) string {
	for _, b := range r.Buttons {
		if b.Kind == notify.ButtonUnsilence {
			return ":no_bell:"
		}
	}
	return ":information_source:"
}
