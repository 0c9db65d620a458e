package outbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// The thread operations: a closed set of types, one per thing a thread says.
// Each encodes its own row (its kind, key and ref: Append) and reads its
// own content from the store at delivery (prepare); the deliverer decodes a
// row into its type once (decodeOp) and dispatches on it.
//
// The stored rows are the contract with every deliverer of every version:
// a type's key and ref are byte-identical to what earlier versions wrote,
// so rows recorded before an upgrade still deliver.
//
//	type           kind     key                                ref
//	Open         open     open                               the thread's channel
//	StepReply         reply    step/<plan>/<step>                 <plan>\x1f<step>
//	Resumed      reply    run/resumed/<n>                    resumed:<n>\x1f<from>\x1f<on> (older: resumed:<n>)
//	CooldownRepeat     reply    run/cooldown/<run>/<playbook>      cooldown:<run>\x1f<playbook>\x1f<ms>\x1f<fired ms>
//	VerdictChanged       reply    verdict/changed/<plan>/<step>      verdict:<plan>\x1f<step>
//	UploadsDone      reply    uploads/done/<n>                   uploads:<n>
//	ActionDone       reply    action/<id>                        action:<id>
//	VerdictEdit      update   close/verdict[/preliminary]        ""
//	VerdictEdit      update   close/verdict/profiled/<plan>/<step>  "" (a profile's refinement)
//	Finished     update   close/finished                     ""
//	Resolved     update   close/resolved                     ""
//	ParentEdit   update   action/edit/<id>                   ""
//	GroupEdit    gupdate  member/<run>/<change>              ""
//	MemberReply  mreply   member/<run>/finished              <run>

// opKind is what a thread operation does to its thread (the outbox's op
// column, and the label of autocapture_notify_delivered_total).
type opKind string

const (
	// opOpen posts the thread's parent message.
	opOpen opKind = "open"
	// opReply posts a reply: a finished step, or the run resumed.
	opReply opKind = "reply"
	// opUpdate edits the parent with the run's state as it is at delivery
	// (verdict, outcome, resolution) and, for the end and the resolution, says
	// so in a reply.
	opUpdate opKind = "update"
	// opGroupUpdate edits a group's parent; pending edits are coalesced.
	opGroupUpdate opKind = "gupdate"
	// opMemberReply posts a group member's compact reply.
	opMemberReply opKind = "mreply"
)

// Op is one thread operation. Its content is the run's state at delivery
// (Slack is a projection of the run row), never a copy that could go stale
// (an expiring link): the row holds only where to read it from.
type Op interface {
	// kind, key and ref are the operation's outbox row. A key is the
	// operation's identity in its thread: recording it again does
	// nothing, and a notifier retrying it finds what it posted.
	Key() string
	kind() opKind
	ref() string
	// prepare reads what the operation says now and returns the call
	// that sends it.
	prepare(ctx context.Context, d delivery) (sendFunc, error)
}

// Content is what operations read their content from at delivery:
// the run lifecycle's rows as a thread shows them (runner/lifecycle's Seams,
// its deliver_content.go). key is the operation's row key, retry says an
// earlier attempt may have posted it; both go into what is sent.
type Content interface {
	// RunInfo is the parent message; channel the thread's.
	RunInfo(ctx context.Context, runID, channel string, retry bool) (notify.RunInfo, error)
	// StepReply is a finished step's reply, from its record.
	StepReply(ctx context.Context, runID, key, plan, step string, retry bool) (notify.StepReport, error)
	// Summary is an edit of the parent: the run's (or its group's) state.
	Summary(ctx context.Context, runID, key string, retry bool) (notify.Summary, error)
	// ChangeReply says the triage step's refined verdict differs.
	ChangeReply(ctx context.Context, runID, key, plan, step string, retry bool) (notify.StepReport, error)
	// UploadsReply says the run's spooled artifacts are uploaded.
	UploadsReply(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error)
	// MemberReport is a group member's compact reply.
	MemberReport(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error)
	// ResumeClaimer is the owner that claimed a resumed run, or a
	// NotYetError while none has (within a lease).
	ResumeClaimer(ctx context.Context, runID string) (string, error)
}

// delivery is what an operation is sent with.
type delivery struct {
	src Content
	// actions says an action's reply; nil when no actions are configured.
	actions ActionContent
	n       notify.Notifier
	// runID is the thread's run (a group's lead).
	runID string
	// key is the row's key: the notifier's identity of what it posts.
	key string
	// retry: an earlier attempt may have posted it.
	retry  bool
	thread notify.Thread
}

// sendFunc makes one call to a notifier; it returns the thread's address
// when the call opened the thread.
type sendFunc func(ctx context.Context) (*notify.Thread, error)

func (d delivery) reply(rep notify.StepReport) sendFunc {
	return func(cctx context.Context) (*notify.Thread, error) { return nil, d.n.Reply(cctx, d.thread, rep) }
}

func (d delivery) edit(sum notify.Summary) sendFunc {
	return func(cctx context.Context) (*notify.Thread, error) { return nil, d.n.Close(cctx, d.thread, sum) }
}

// refSep separates the fields of a ref.
const refSep = "\x1f"

// Prefixes of the refs of replies that are not a step's.
const (
	resumedRefPrefix  = "resumed:"
	cooldownRefPrefix = "cooldown:"
	verdictRefPrefix  = "verdict:"
	uploadsRefPrefix  = "uploads:"
)

// decodeOp reads an outbox row back into its operation. Replies are told
// apart by their refs, in the order the deliverer of earlier versions read
// them; edits by their keys.
func decodeOp(kind opKind, key, ref string) (Op, error) {
	switch kind {
	case opOpen:
		return Open{Channel: ref}, nil
	case opReply:
		switch {
		case strings.HasPrefix(ref, resumedRefPrefix):
			n, from, on, _ := splitResumedRef(ref)
			return Resumed{N: n, From: from, On: on}, nil
		case strings.HasPrefix(ref, cooldownRefPrefix):
			return decodeCooldown(ref)
		case strings.HasPrefix(ref, verdictRefPrefix):
			if plan, step, ok := splitStepRef(ref[len(verdictRefPrefix):]); ok {
				return VerdictChanged{Plan: plan, Step: step}, nil
			}
		case strings.HasPrefix(ref, actionRefPrefix):
			if op, ok := decodeAction(ref); ok {
				return op, nil
			}
		case strings.HasPrefix(ref, uploadsRefPrefix):
			if n, err := strconv.Atoi(ref[len(uploadsRefPrefix):]); err == nil {
				return UploadsDone{N: n}, nil
			}
		default:
			if plan, step, ok := splitStepRef(ref); ok {
				return StepReply{Plan: plan, Step: step}, nil
			}
		}
	case opUpdate:
		switch key {
		case notify.KeyCloseVerdict:
			return VerdictEdit{}, nil
		case notify.KeyCloseVerdictPreliminary:
			return VerdictEdit{Preliminary: true}, nil
		case notify.KeyCloseFinished:
			return Finished{}, nil
		case notify.KeyCloseResolved:
			return Resolved{}, nil
		}
		if by, ok := strings.CutPrefix(key, notify.KeyCloseVerdictProfiled+"/"); ok && by != "" {
			return VerdictEdit{Profiled: by}, nil
		}
		if id, ok := strings.CutPrefix(key, notify.KeyActionEdit); ok && id != "" {
			return ParentEdit{ID: id}, nil
		}
		return nil, fmt.Errorf("unknown edit %q", key)
	case opGroupUpdate:
		if member, change, ok := splitMemberKey(key); ok {
			return GroupEdit{Member: member, Change: change}, nil
		}
		return nil, fmt.Errorf("unknown group edit %q", key)
	case opMemberReply:
		return MemberReply{Member: ref}, nil
	default:
		return nil, fmt.Errorf("unknown thread operation %q", kind)
	}
	return nil, fmt.Errorf("reply %s: bad ref %q", key, ref)
}

// badOp is a row decodeOp could not read: its delivery fails, and is
// retried, as any failed delivery is.
type badOp struct {
	k        opKind
	row, raw string
	err      error
}

func (o badOp) kind() opKind { return o.k }
func (o badOp) Key() string  { return o.row }
func (o badOp) ref() string  { return o.raw }

func (o badOp) prepare(context.Context, delivery) (sendFunc, error) { return nil, o.err }

// Open posts the thread's parent; Channel is the playbook's notify.channel
// ("" for the notifier's default).
type Open struct{ Channel string }

func (Open) kind() opKind  { return opOpen }
func (Open) Key() string   { return notify.KeyOpen }
func (o Open) ref() string { return o.Channel }

func (o Open) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	info, err := d.src.RunInfo(ctx, d.runID, o.Channel, d.retry)
	if err != nil {
		return nil, err
	}
	return func(cctx context.Context) (*notify.Thread, error) {
		t, err := d.n.Open(cctx, info)
		return &t, err
	}, nil
}

// StepReply replies with a finished step: its plan and id in autocapture_steps.
type StepReply struct{ Plan, Step string }

func (StepReply) kind() opKind  { return opReply }
func (o StepReply) Key() string { return "step/" + o.Plan + "/" + o.Step }
func (o StepReply) ref() string { return stepRef(o.Plan, o.Step) }

func (o StepReply) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	rep, err := d.src.StepReply(ctx, d.runID, d.key, o.Plan, o.Step, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

func stepKey(plan, step string) string { return StepReply{Plan: plan, Step: step}.Key() }

// stepRef is the ref of a step's reply: its plan and id in autocapture_steps.
func stepRef(plan, step string) string { return plan + refSep + step }

func splitStepRef(ref string) (plan, step string, ok bool) { return strings.Cut(ref, refSep) }

// Resumed replies that the run was resumed, the N-th time: From is the
// owner it was taken from ("" when none held it), On the one that took it
// ("" while the reaper's record waits for a claimer: the claimer appends
// it to the ref). A ref of the older form, "resumed:N", names neither.
type Resumed struct {
	N        int
	From, On string
}

func (Resumed) kind() opKind  { return opReply }
func (o Resumed) Key() string { return resumedKey(o.N) }
func (o Resumed) ref() string { return resumedRef(o.N, o.From, o.On) }

func (o Resumed) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	on := o.On
	if on == "" && o.From != "" { // recorded by the reaper, not claimed yet (Claimed names the claimer)
		var err error
		if on, err = d.src.ResumeClaimer(ctx, d.runID); err != nil {
			return nil, fmt.Errorf("reply %s: %w", d.key, err)
		}
	}
	return d.reply(notify.StepReport{RunID: d.runID, StepID: "run", Kind: "run", Status: vocab.StatusRunning, Key: d.key,
		Retry: d.retry, Notice: resumedNotice(o.N, o.From, on)}), nil
}

func resumedKey(n int) string { return fmt.Sprintf("run/resumed/%d", n) }

// resumedRef is the ref of a resume's reply (Resumed).
func resumedRef(n int, from, on string) string {
	return fmt.Sprintf("%s%d%s%s%s%s", resumedRefPrefix, n, refSep, from, refSep, on)
}

// splitResumedRef reads a resumedRef.
func splitResumedRef(ref string) (n int, from, on string, ok bool) {
	rest, ok := strings.CutPrefix(ref, resumedRefPrefix)
	if !ok {
		return 0, "", "", false
	}
	num, rest, _ := strings.Cut(rest, refSep)
	from, on, _ = strings.Cut(rest, refSep)
	n, _ = strconv.Atoi(num)
	return n, from, on, true
}

// CooldownRepeat replies in the thread holding the evidence that run Repeat's
// alert fired again (at Fired, to the millisecond) inside Playbook's
// Cooldown (the runner's cooldown.go).
type CooldownRepeat struct {
	Repeat, Playbook string
	Cooldown         time.Duration
	Fired            time.Time
}

func (CooldownRepeat) kind() opKind  { return opReply }
func (o CooldownRepeat) Key() string { return cooldownKey(o.Repeat, o.Playbook) }
func (o CooldownRepeat) ref() string {
	return fmt.Sprintf("%s%s%s%s%s%d%s%d", cooldownRefPrefix, o.Repeat, refSep, o.Playbook, refSep,
		o.Cooldown.Milliseconds(), refSep, o.Fired.UnixMilli())
}

// prepare: a notice shows no status, but it must not carry the skipped one,
// which Slack hides by default (notify.slack.post_skipped): the skipped run
// is the repeat, not the holder whose thread this is.
func (o CooldownRepeat) prepare(_ context.Context, d delivery) (sendFunc, error) {
	return d.reply(notify.StepReport{RunID: d.runID, StepID: "run", Kind: "run", Status: vocab.StatusSucceeded, Key: d.key,
		Retry: d.retry, Notice: o.notice()}), nil
}

// notice is the reply as the on-call reads it.
func (o CooldownRepeat) notice() string {
	return fmt.Sprintf("fired again at %s (run %s); within %s's %s cooldown — evidence above",
		o.Fired.UTC().Format("15:04:05 UTC"), o.Repeat, o.Playbook, shortDuration(o.Cooldown))
}

func cooldownKey(repeat, playbook string) string { return "run/cooldown/" + repeat + "/" + playbook }

func decodeCooldown(ref string) (Op, error) {
	f := strings.Split(strings.TrimPrefix(ref, cooldownRefPrefix), refSep)
	if len(f) != 4 {
		return nil, fmt.Errorf("cooldown reply: bad ref %q", ref)
	}
	d, _ := strconv.ParseInt(f[2], 10, 64)
	fired, _ := strconv.ParseInt(f[3], 10, 64)
	return CooldownRepeat{Repeat: f[0], Playbook: f[1], Cooldown: time.Duration(d) * time.Millisecond, Fired: time.UnixMilli(fired).UTC()}, nil
}

// VerdictChanged replies that the refined verdict of the triage step Plan/Step
// differs from the preliminary one (runner/lifecycle's verdicts.go).
type VerdictChanged struct{ Plan, Step string }

func (VerdictChanged) kind() opKind  { return opReply }
func (o VerdictChanged) Key() string { return verdictChangedKey(o.Plan, o.Step) }
func (o VerdictChanged) ref() string { return verdictRefPrefix + stepRef(o.Plan, o.Step) }

func (o VerdictChanged) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	rep, err := d.src.ChangeReply(ctx, d.runID, d.key, o.Plan, o.Step, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

func verdictChangedKey(plan, step string) string { return "verdict/changed/" + plan + "/" + step }

// UploadsDone replies that the run's N spooled artifacts are all uploaded
// (runner/artifacts' upload.go).
type UploadsDone struct{ N int }

func (UploadsDone) kind() opKind  { return opReply }
func (o UploadsDone) Key() string { return "uploads/done/" + strconv.Itoa(o.N) }
func (o UploadsDone) ref() string { return uploadsRefPrefix + strconv.Itoa(o.N) }

func (o UploadsDone) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	rep, err := d.src.UploadsReply(ctx, d.runID, d.key, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

// VerdictEdit edits the parent with the run's verdict: preliminary (the PromQL
// snapshot's), refined (the triage step's), or refined by a profile's
// finding (Profiled: "<plan>/<step>" of the profile step).
type VerdictEdit struct {
	Preliminary bool
	Profiled    string
}

func (VerdictEdit) kind() opKind { return opUpdate }
func (VerdictEdit) ref() string  { return "" }
func (o VerdictEdit) Key() string {
	switch {
	case o.Profiled != "":
		return notify.KeyCloseVerdictProfiled + "/" + o.Profiled
	case o.Preliminary:
		return notify.KeyCloseVerdictPreliminary
	}
	return notify.KeyCloseVerdict
}

func (VerdictEdit) prepare(ctx context.Context, d delivery) (sendFunc, error) { return d.summary(ctx) }

// Finished edits the parent with the run's end, and says it in a reply.
type Finished struct{}

func (Finished) kind() opKind { return opUpdate }
func (Finished) Key() string  { return notify.KeyCloseFinished }
func (Finished) ref() string  { return "" }

func (Finished) prepare(ctx context.Context, d delivery) (sendFunc, error) { return d.summary(ctx) }

// Resolved edits the parent with the alert's resolution, and says it in a
// reply.
type Resolved struct{}

func (Resolved) kind() opKind { return opUpdate }
func (Resolved) Key() string  { return notify.KeyCloseResolved }
func (Resolved) ref() string  { return "" }

func (Resolved) prepare(ctx context.Context, d delivery) (sendFunc, error) { return d.summary(ctx) }

// summary is an edit of the run's parent: its state now.
func (d delivery) summary(ctx context.Context) (sendFunc, error) {
	sum, err := d.src.Summary(ctx, d.runID, d.key, d.retry)
	if err != nil {
		return nil, err
	}
	return d.edit(sum), nil
}

// MemberChange is what a group member's edit of its group's parent shows.
type MemberChange string

const (
	MemberJoined      MemberChange = "joined"
	MemberVerdict     MemberChange = "verdict"
	MemberPreliminary MemberChange = "verdict/preliminary"
	MemberProfiled    MemberChange = "verdict/profiled"
	MemberEnded       MemberChange = "ended"
	MemberResolved    MemberChange = "resolved"
	// memberFinished keys a member's compact reply (MemberReply).
	memberFinished = "finished"
)

// GroupEdit edits a group's parent for member Member's Change; the
// parent shows every member as it is at delivery, so pending edits coalesce
// (coalesced).
type GroupEdit struct {
	Member string
	Change MemberChange
}

func (GroupEdit) kind() opKind  { return opGroupUpdate }
func (o GroupEdit) Key() string { return memberKey(o.Member, string(o.Change)) }
func (GroupEdit) ref() string   { return "" }

func (GroupEdit) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	sum, err := d.src.Summary(ctx, d.runID, notify.KeyGroupUpdate, d.retry)
	if err != nil {
		return nil, err
	}
	if sum.Group == nil { // a fleet of its lead alone shows nothing new
		return func(context.Context) (*notify.Thread, error) { return nil, nil }, nil
	}
	return d.edit(sum), nil
}

// MemberReply posts group member Member's compact reply once it ended.
type MemberReply struct{ Member string }

func (MemberReply) kind() opKind  { return opMemberReply }
func (o MemberReply) Key() string { return memberKey(o.Member, memberFinished) }
func (o MemberReply) ref() string { return o.Member }

func (o MemberReply) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	rep, err := d.src.MemberReport(ctx, o.Member, d.key, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

func memberKey(runID, what string) string { return "member/" + runID + "/" + what }

// splitMemberKey reads a GroupEdit's key.
func splitMemberKey(key string) (runID string, change MemberChange, ok bool) {
	rest, ok := strings.CutPrefix(key, "member/")
	if !ok {
		return "", "", false
	}
	for _, c := range []MemberChange{MemberPreliminary, MemberProfiled, MemberJoined, MemberVerdict, MemberEnded, MemberResolved} {
		if id, ok := strings.CutSuffix(rest, "/"+string(c)); ok && id != "" {
			return id, c, true
		}
	}
	return "", "", false
}
