package runner

import (
	"github.com/autocapture/autocapture/runner/outbox"
)

// The keys of the thread operations the tests look for in a thread: each
// operation's own (outbox.Op.Key).
var (
	keyOpen               = outbox.Open{}.Key()
	keyVerdict            = outbox.VerdictEdit{}.Key()
	keyVerdictPreliminary = outbox.VerdictEdit{Preliminary: true}.Key()
	keyFinished           = outbox.Finished{}.Key()
	keyResolved           = outbox.Resolved{}.Key()
)

func stepKey(plan, step string) string { return outbox.StepReply{Plan: plan, Step: step}.Key() }

func resumedKey(n int) string { return outbox.Resumed{N: n}.Key() }

func verdictChangedKey(plan, step string) string {
	return outbox.VerdictChanged{Plan: plan, Step: step}.Key()
}

func cooldownKey(repeat, playbook string) string {
	return outbox.CooldownRepeat{Repeat: repeat, Playbook: playbook}.Key()
}

// memberKey is the key of a group member's edit (what: its change) or, with
// "finished", of its compact reply.
func memberKey(runID, what string) string {
	if what == "finished" {
		return outbox.MemberReply{Member: runID}.Key()
	}
	return outbox.GroupEdit{Member: runID, Change: outbox.MemberChange(what)}.Key()
}
