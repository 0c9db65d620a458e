package outbox

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// TestOpRefsRoundTrip: every thread operation writes the row (kind, key,
// ref) that earlier versions wrote for it, byte for byte, and decodes back
// from it to itself; rows only earlier versions wrote (an older resume ref,
// a resume ref completed by its claimer) decode to the operation they meant.
// Rows in a live database recorded before an upgrade therefore still deliver.
func TestOpRefsRoundTrip(t *testing.T) {
	fired := time.UnixMilli(1767323525123).UTC() // 2026-01-02T03:12:05.123Z
	tests := []struct {
		op             Op
		kind, key, ref string
	}{
		{Open{}, "open", "open", ""},
		{Open{Channel: "#inference-oncall"}, "open", "open", "#inference-oncall"},
		{StepReply{Plan: "vllm-queue-deep", Step: "tri"}, "reply", "step/vllm-queue-deep/tri", "vllm-queue-deep\x1ftri"},
		{Resumed{N: 2, From: "r0/7/1a2b3c4d", On: "r1/9/5e6f7a8b"}, "reply", "run/resumed/2",
			"resumed:2\x1fr0/7/1a2b3c4d\x1fr1/9/5e6f7a8b"},
		{Resumed{N: 3, From: "r0/7/1a2b3c4d"}, "reply", "run/resumed/3", "resumed:3\x1fr0/7/1a2b3c4d\x1f"},
		{Resumed{N: 1}, "reply", "run/resumed/1", "resumed:1\x1f\x1f"},
		{Resumed{N: 4, On: "r1/9/5e6f7a8b"}, "reply", "run/resumed/4", "resumed:4\x1f\x1fr1/9/5e6f7a8b"},
		{CooldownRepeat{Repeat: "run-2", Playbook: "vllm-queue-deep", Cooldown: 10 * time.Minute, Fired: fired}, "reply",
			"run/cooldown/run-2/vllm-queue-deep", "cooldown:run-2\x1fvllm-queue-deep\x1f600000\x1f1767323525123"},
		{VerdictChanged{Plan: "pb", Step: "tri"}, "reply", "verdict/changed/pb/tri", "verdict:pb\x1ftri"},
		{UploadsDone{N: 3}, "reply", "uploads/done/3", "uploads:3"},
		{VerdictEdit{}, "update", "close/verdict", ""},
		{VerdictEdit{Preliminary: true}, "update", "close/verdict/preliminary", ""},
		{VerdictEdit{Profiled: "vllm-high-itl/profile"}, "update", "close/verdict/profiled/vllm-high-itl/profile", ""},
		{Finished{}, "update", "close/finished", ""},
		{Resolved{}, "update", "close/resolved", ""},
		{GroupEdit{Member: "run-7", Change: MemberJoined}, "gupdate", "member/run-7/joined", ""},
		{GroupEdit{Member: "run-7", Change: MemberVerdict}, "gupdate", "member/run-7/verdict", ""},
		{GroupEdit{Member: "run-7", Change: MemberPreliminary}, "gupdate", "member/run-7/verdict/preliminary", ""},
		{GroupEdit{Member: "run-7", Change: MemberProfiled}, "gupdate", "member/run-7/verdict/profiled", ""},
		{GroupEdit{Member: "run-7", Change: MemberEnded}, "gupdate", "member/run-7/ended", ""},
		{GroupEdit{Member: "run-7", Change: MemberResolved}, "gupdate", "member/run-7/resolved", ""},
		{MemberReply{Member: "run-7"}, "mreply", "member/run-7/finished", "run-7"},
	}
	for _, tt := range tests {
		if k, key, ref := string(tt.op.kind()), tt.op.Key(), tt.op.ref(); k != tt.kind || key != tt.key || ref != tt.ref {
			t.Errorf("%#v writes (%q, %q, %q), want (%q, %q, %q)", tt.op, k, key, ref, tt.kind, tt.key, tt.ref)
		}
		got, err := decodeOp(opKind(tt.kind), tt.key, tt.ref)
		if err != nil || !reflect.DeepEqual(got, tt.op) {
			t.Errorf("decodeOp(%q, %q, %q) = %#v, %v; want %#v", tt.kind, tt.key, tt.ref, got, err, tt.op)
		}
	}

	// Rows of earlier versions, as they were stored.
	older := []struct {
		name           string
		kind, key, ref string
		want           Op
	}{
		{"a resume ref before replicas were named", "reply", "run/resumed/11", "resumed:11", Resumed{N: 11}},
		{"the reaper's resume ref completed by its claimer (Outbox.AppendRef)", "reply", "run/resumed/5",
			"resumed:5\x1fr0/7/1a2b3c4d\x1f" + "r1/9/5e6f7a8b", Resumed{N: 5, From: "r0/7/1a2b3c4d", On: "r1/9/5e6f7a8b"}},
		{"an open without a channel", "open", "open", "", Open{}},
	}
	for _, tt := range older {
		got, err := decodeOp(opKind(tt.kind), tt.key, tt.ref)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: decodeOp(%q, %q, %q) = %#v, %v; want %#v", tt.name, tt.kind, tt.key, tt.ref, got, err, tt.want)
		}
		if err == nil && got.Key() != tt.key {
			t.Errorf("%s: decoded key %q, stored %q", tt.name, got.Key(), tt.key)
		}
	}

	// Rows no version wrote fail their delivery (retried), as they did.
	for _, r := range [][3]string{{"reply", "step/x", "no separator"}, {"reply", "uploads/done/x", "uploads:x"},
		{"reply", "run/cooldown/a/b", "cooldown:a\x1fb"}, {"update", "close/other", ""}, {"gupdate", "member/x", ""},
		{"edit", "open", ""}} {
		if got, err := decodeOp(opKind(r[0]), r[1], r[2]); err == nil {
			t.Errorf("decodeOp(%q, %q, %q) = %#v, want an error", r[0], r[1], r[2], got)
		}
	}
}

// TestCooldownNotice: a repeat inside a cooldown reads as the on-call reads
// it, from its stored ref.
func TestCooldownNotice(t *testing.T) {
	o, err := decodeOp(opReply, "run/cooldown/run-2/vllm-queue-deep", "cooldown:run-2\x1fvllm-queue-deep\x1f600000\x1f1767323525123")
	if err != nil {
		t.Fatal(err)
	}
	want := "fired again at 03:12:05 UTC (run run-2); within vllm-queue-deep's 10m cooldown — evidence above"
	if got := o.(CooldownRepeat).notice(); got != want {
		t.Errorf("notice %q, want %q", got, want)
	}
}

// replyRecorder is a notifier that keeps the replies it is given.
type replyRecorder struct{ replies []notify.StepReport }

func (r *replyRecorder) Open(context.Context, notify.RunInfo) (notify.Thread, error) {
	return notify.Thread{}, nil
}
func (r *replyRecorder) Reply(_ context.Context, _ notify.Thread, rep notify.StepReport) error {
	r.replies = append(r.replies, rep)
	return nil
}
func (r *replyRecorder) Close(context.Context, notify.Thread, notify.Summary) error { return nil }

// TestCooldownRepeatIsNotASkippedStep: the repeat's reply is a notice in the
// holder's thread, not a skipped step's report: Slack drops those unless
// notify.slack.post_skipped is set, and on the defaults the reply never
// reached the thread although the outbox marked it delivered.
func TestCooldownRepeatIsNotASkippedStep(t *testing.T) {
	rec := &replyRecorder{}
	o := CooldownRepeat{Repeat: "run-2", Playbook: "pb", Cooldown: time.Minute, Fired: time.Unix(0, 0)}
	send, err := o.prepare(context.Background(), delivery{n: rec, runID: "run-1", key: o.Key()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := send(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.replies) != 1 {
		t.Fatalf("%d replies, want 1", len(rec.replies))
	}
	rep := rec.replies[0]
	if rep.Status == vocab.StatusSkipped || rep.Notice == "" || rep.RunID != "run-1" {
		t.Errorf("reply %+v: want a notice in run-1's thread whose status is not %q", rep, vocab.StatusSkipped)
	}
}
