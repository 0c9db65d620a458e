package runner

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/autocapture/autocapture/notify"
)

// The thread operations: a closed set of types, one per thing a thread says.
// Each encodes its own row (its kind, key and ref: recordOps) and reads its
// own content from the store at delivery (prepare); the deliverer decodes a
// row into its type once (decodeOp) and dispatches on it.
//
// The stored rows are the contract with every deliverer of every version:
// a type's key and ref are byte-identical to what earlier versions wrote
// (TestOpRefsRoundTrip), so rows recorded before an upgrade still deliver.
//
//	type           kind     key                                ref
//	openOp         open     open                               the thread's channel
//	stepOp         reply    step/<plan>/<step>                 <plan>\x1f<step>
//	resumedOp      reply    run/resumed/<n>                    resumed:<n>\x1f<from>\x1f<on> (older: resumed:<n>)
//	cooldownOp     reply    run/cooldown/<run>/<playbook>      cooldown:<run>\x1f<playbook>\x1f<ms>\x1f<fired ms>
//	changeOp       reply    verdict/changed/<plan>/<step>      verdict:<plan>\x1f<step>
//	uploadsOp      reply    uploads/done/<n>                   uploads:<n>
//	verdictOp      update   close/verdict[/preliminary]        ""
//	finishedOp     update   close/finished                     ""
//	resolvedOp     update   close/resolved                     ""
//	groupEditOp    gupdate  member/<run>/<change>              ""
//	memberReplyOp  mreply   member/<run>/finished              <run>

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

// op is one thread operation. Its content is the run's state at delivery
// (Slack is a projection of the run row), never a copy that could go stale
// (an expiring link): the row holds only where to read it from.
type op interface {
	// kind, key and ref are the operation's outbox row. A key is the
	// operation's identity in its thread: recording it again does
	// nothing, and a notifier retrying it finds what it posted.
	kind() opKind
	key() string
	ref() string
	// prepare reads what the operation says now and returns the call
	// that sends it.
	prepare(ctx context.Context, d delivery) (sendFunc, error)
}

// threadContent is what operations read their content from at delivery:
// the run lifecycle's rows as a thread shows them (the Service,
// deliver_content.go). key is the operation's row key, retry says an
// earlier attempt may have posted it; both go into what is sent.
type threadContent interface {
	// runInfo is the parent message; channel the thread's.
	runInfo(ctx context.Context, runID, channel string, retry bool) (notify.RunInfo, error)
	// stepReply is a finished step's reply, from its record.
	stepReply(ctx context.Context, runID, key, plan, step string, retry bool) (notify.StepReport, error)
	// summaryFor is an edit of the parent: the run's (or its group's) state.
	summaryFor(ctx context.Context, runID, key string, retry bool) (notify.Summary, error)
	// changeReply says the triage step's refined verdict differs.
	changeReply(ctx context.Context, runID, key, plan, step string, retry bool) (notify.StepReport, error)
	// uploadsReply says the run's spooled artifacts are uploaded.
	uploadsReply(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error)
	// memberReport is a group member's compact reply.
	memberReport(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error)
	// resumeClaimer is the owner that claimed a resumed run, or
	// errNotYet while none has (within a lease).
	resumeClaimer(ctx context.Context, runID string) (string, error)
}

// delivery is what an operation is sent with.
type delivery struct {
	src threadContent
	n   notify.Notifier
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

// Keys of the parent and its edits.
const (
	keyOpen               = notify.KeyOpen
	keyVerdict            = notify.KeyCloseVerdict
	keyVerdictPreliminary = notify.KeyCloseVerdictPreliminary
	keyFinished           = notify.KeyCloseFinished
	keyResolved           = notify.KeyCloseResolved
)

// decodeOp reads an outbox row back into its operation. Replies are told
// apart by their refs, in the order the deliverer of earlier versions read
// them; edits by their keys.
func decodeOp(kind opKind, key, ref string) (op, error) {
	switch kind {
	case opOpen:
		return openOp{Channel: ref}, nil
	case opReply:
		switch {
		case strings.HasPrefix(ref, resumedRefPrefix):
			n, from, on, _ := splitResumedRef(ref)
			return resumedOp{N: n, From: from, On: on}, nil
		case strings.HasPrefix(ref, cooldownRefPrefix):
			return decodeCooldown(ref)
		case strings.HasPrefix(ref, verdictRefPrefix):
			if plan, step, ok := splitStepRef(ref[len(verdictRefPrefix):]); ok {
				return changeOp{Plan: plan, Step: step}, nil
			}
		case strings.HasPrefix(ref, uploadsRefPrefix):
			if n, err := strconv.Atoi(ref[len(uploadsRefPrefix):]); err == nil {
				return uploadsOp{N: n}, nil
			}
		default:
			if plan, step, ok := splitStepRef(ref); ok {
				return stepOp{Plan: plan, Step: step}, nil
			}
		}
	case opUpdate:
		switch key {
		case keyVerdict:
			return verdictOp{}, nil
		case keyVerdictPreliminary:
			return verdictOp{Preliminary: true}, nil
		case keyFinished:
			return finishedOp{}, nil
		case keyResolved:
			return resolvedOp{}, nil
		}
		return nil, fmt.Errorf("unknown edit %q", key)
	case opGroupUpdate:
		if member, change, ok := splitMemberKey(key); ok {
			return groupEditOp{Member: member, Change: change}, nil
		}
		return nil, fmt.Errorf("unknown group edit %q", key)
	case opMemberReply:
		return memberReplyOp{Member: ref}, nil
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
func (o badOp) key() string  { return o.row }
func (o badOp) ref() string  { return o.raw }

func (o badOp) prepare(context.Context, delivery) (sendFunc, error) { return nil, o.err }

// openOp posts the thread's parent; Channel is the playbook's notify.channel
// ("" for the notifier's default).
type openOp struct{ Channel string }

func (openOp) kind() opKind  { return opOpen }
func (openOp) key() string   { return keyOpen }
func (o openOp) ref() string { return o.Channel }

func (o openOp) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	info, err := d.src.runInfo(ctx, d.runID, o.Channel, d.retry)
	if err != nil {
		return nil, err
	}
	return func(cctx context.Context) (*notify.Thread, error) {
		t, err := d.n.Open(cctx, info)
		return &t, err
	}, nil
}

// stepOp replies with a finished step: its plan and id in autocapture_steps.
type stepOp struct{ Plan, Step string }

func (stepOp) kind() opKind  { return opReply }
func (o stepOp) key() string { return "step/" + o.Plan + "/" + o.Step }
func (o stepOp) ref() string { return stepRef(o.Plan, o.Step) }

func (o stepOp) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	rep, err := d.src.stepReply(ctx, d.runID, d.key, o.Plan, o.Step, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

func stepKey(plan, step string) string { return stepOp{Plan: plan, Step: step}.key() }

// stepRef is the ref of a step's reply: its plan and id in autocapture_steps.
func stepRef(plan, step string) string { return plan + refSep + step }

func splitStepRef(ref string) (plan, step string, ok bool) { return strings.Cut(ref, refSep) }

// resumedOp replies that the run was resumed, the N-th time: From is the
// owner it was taken from ("" when none held it), On the one that took it
// ("" while the reaper's record waits for a claimer: recordResumed appends
// it to the ref). A ref of the older form, "resumed:N", names neither.
type resumedOp struct {
	N        int
	From, On string
}

func (resumedOp) kind() opKind  { return opReply }
func (o resumedOp) key() string { return resumedKey(o.N) }
func (o resumedOp) ref() string { return resumedRef(o.N, o.From, o.On) }

func (o resumedOp) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	on := o.On
	if on == "" && o.From != "" { // recorded by the reaper, not claimed yet (recordResumed names the claimer)
		var err error
		if on, err = d.src.resumeClaimer(ctx, d.runID); err != nil {
			return nil, fmt.Errorf("reply %s: %w", d.key, err)
		}
	}
	return d.reply(notify.StepReport{RunID: d.runID, StepID: "run", Kind: "run", Status: StatusRunning, Key: d.key,
		Retry: d.retry, Notice: resumedNotice(o.N, o.From, on)}), nil
}

func resumedKey(n int) string { return fmt.Sprintf("run/resumed/%d", n) }

// resumedRef is the ref of a resume's reply (resumedOp).
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

// cooldownOp replies in the thread holding the evidence that run Repeat's
// alert fired again (at Fired, to the millisecond) inside Playbook's
// Cooldown (cooldown.go).
type cooldownOp struct {
	Repeat, Playbook string
	Cooldown         time.Duration
	Fired            time.Time
}

func (cooldownOp) kind() opKind  { return opReply }
func (o cooldownOp) key() string { return cooldownKey(o.Repeat, o.Playbook) }
func (o cooldownOp) ref() string {
	return fmt.Sprintf("%s%s%s%s%s%d%s%d", cooldownRefPrefix, o.Repeat, refSep, o.Playbook, refSep,
		o.Cooldown.Milliseconds(), refSep, toMS(o.Fired))
}

func (o cooldownOp) prepare(_ context.Context, d delivery) (sendFunc, error) {
	return d.reply(notify.StepReport{RunID: d.runID, StepID: "run", Kind: "run", Status: StatusSkipped, Key: d.key,
		Retry: d.retry, Notice: o.notice()}), nil
}

// notice is the reply as the on-call reads it.
func (o cooldownOp) notice() string {
	return fmt.Sprintf("fired again at %s (run %s); within %s's %s cooldown — evidence above",
		o.Fired.UTC().Format("15:04:05 UTC"), o.Repeat, o.Playbook, shortDuration(o.Cooldown))
}

func cooldownKey(repeat, playbook string) string { return "run/cooldown/" + repeat + "/" + playbook }

func decodeCooldown(ref string) (op, error) {
	f := strings.Split(strings.TrimPrefix(ref, cooldownRefPrefix), refSep)
	if len(f) != 4 {
		return nil, fmt.Errorf("cooldown reply: bad ref %q", ref)
	}
	d, _ := strconv.ParseInt(f[2], 10, 64)
	fired, _ := strconv.ParseInt(f[3], 10, 64)
	return cooldownOp{Repeat: f[0], Playbook: f[1], Cooldown: time.Duration(d) * time.Millisecond, Fired: fromMS(fired)}, nil
}

// changeOp replies that the refined verdict of the triage step Plan/Step
// differs from the preliminary one (verdicts.go).
type changeOp struct{ Plan, Step string }

func (changeOp) kind() opKind  { return opReply }
func (o changeOp) key() string { return verdictChangedKey(o.Plan, o.Step) }
func (o changeOp) ref() string { return verdictRefPrefix + stepRef(o.Plan, o.Step) }

func (o changeOp) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	rep, err := d.src.changeReply(ctx, d.runID, d.key, o.Plan, o.Step, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

func verdictChangedKey(plan, step string) string { return "verdict/changed/" + plan + "/" + step }

// uploadsOp replies that the run's N spooled artifacts are all uploaded
// (upload.go).
type uploadsOp struct{ N int }

func (uploadsOp) kind() opKind  { return opReply }
func (o uploadsOp) key() string { return "uploads/done/" + strconv.Itoa(o.N) }
func (o uploadsOp) ref() string { return uploadsRefPrefix + strconv.Itoa(o.N) }

func (o uploadsOp) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	rep, err := d.src.uploadsReply(ctx, d.runID, d.key, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

// verdictOp edits the parent with the run's verdict: preliminary (the PromQL
// snapshot's) or refined (the triage step's).
type verdictOp struct{ Preliminary bool }

func (verdictOp) kind() opKind { return opUpdate }
func (verdictOp) ref() string  { return "" }
func (o verdictOp) key() string {
	if o.Preliminary {
		return keyVerdictPreliminary
	}
	return keyVerdict
}

func (verdictOp) prepare(ctx context.Context, d delivery) (sendFunc, error) { return d.summary(ctx) }

// finishedOp edits the parent with the run's end, and says it in a reply.
type finishedOp struct{}

func (finishedOp) kind() opKind { return opUpdate }
func (finishedOp) key() string  { return keyFinished }
func (finishedOp) ref() string  { return "" }

func (finishedOp) prepare(ctx context.Context, d delivery) (sendFunc, error) { return d.summary(ctx) }

// resolvedOp edits the parent with the alert's resolution, and says it in a
// reply.
type resolvedOp struct{}

func (resolvedOp) kind() opKind { return opUpdate }
func (resolvedOp) key() string  { return keyResolved }
func (resolvedOp) ref() string  { return "" }

func (resolvedOp) prepare(ctx context.Context, d delivery) (sendFunc, error) { return d.summary(ctx) }

// summary is an edit of the run's parent: its state now.
func (d delivery) summary(ctx context.Context) (sendFunc, error) {
	sum, err := d.src.summaryFor(ctx, d.runID, d.key, d.retry)
	if err != nil {
		return nil, err
	}
	return d.edit(sum), nil
}

// memberChange is what a group member's edit of its group's parent shows.
type memberChange string

const (
	memberJoined      memberChange = "joined"
	memberVerdict     memberChange = "verdict"
	memberPreliminary memberChange = "verdict/preliminary"
	memberEnded       memberChange = "ended"
	memberResolved    memberChange = "resolved"
	// memberFinished keys a member's compact reply (memberReplyOp).
	memberFinished = "finished"
)

// groupEditOp edits a group's parent for member Member's Change; the
// parent shows every member as it is at delivery, so pending edits coalesce
// (coalesced).
type groupEditOp struct {
	Member string
	Change memberChange
}

func (groupEditOp) kind() opKind  { return opGroupUpdate }
func (o groupEditOp) key() string { return memberKey(o.Member, string(o.Change)) }
func (groupEditOp) ref() string   { return "" }

func (groupEditOp) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	sum, err := d.src.summaryFor(ctx, d.runID, notify.KeyGroupUpdate, d.retry)
	if err != nil {
		return nil, err
	}
	if sum.Group == nil { // a fleet of its lead alone shows nothing new
		return func(context.Context) (*notify.Thread, error) { return nil, nil }, nil
	}
	return d.edit(sum), nil
}

// memberReplyOp posts group member Member's compact reply once it ended.
type memberReplyOp struct{ Member string }

func (memberReplyOp) kind() opKind  { return opMemberReply }
func (o memberReplyOp) key() string { return memberKey(o.Member, memberFinished) }
func (o memberReplyOp) ref() string { return o.Member }

func (o memberReplyOp) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	rep, err := d.src.memberReport(ctx, o.Member, d.key, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

func memberKey(runID, what string) string { return "member/" + runID + "/" + what }

// splitMemberKey reads a groupEditOp's key.
func splitMemberKey(key string) (runID string, change memberChange, ok bool) {
	rest, ok := strings.CutPrefix(key, "member/")
	if !ok {
		return "", "", false
	}
	for _, c := range []memberChange{memberPreliminary, memberJoined, memberVerdict, memberEnded, memberResolved} {
		if id, ok := strings.CutSuffix(rest, "/"+string(c)); ok && id != "" {
			return id, c, true
		}
	}
	return "", "", false
}
