package outbox

import (
	"context"
	"errors"
	"strings"

	"github.com/autocapture/autocapture/notify"
)

// ActionContent is what an action's reply reads at delivery: the action's
// row as the thread shows it (runner/actions). key is the row's key.
type ActionContent interface {
	ActionReply(ctx context.Context, runID, key, actionID string, retry bool) (notify.StepReport, error)
}

// actionRefPrefix marks an action's reply: action:<id>.
const actionRefPrefix = "action:"

// ActionDone replies with what an action from the thread did (a silence
// made or expired, or why not), written in the transaction that finishes
// the action's row, so a kill -9 leaves both or neither.
type ActionDone struct{ ID string }

func (ActionDone) kind() opKind  { return opReply }
func (o ActionDone) Key() string { return "action/" + o.ID }
func (o ActionDone) ref() string { return actionRefPrefix + o.ID }

func (o ActionDone) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	if d.actions == nil {
		return nil, errors.New("an action's reply, and no actions configured to say it")
	}
	rep, err := d.actions.ActionReply(ctx, d.runID, d.key, o.ID, d.retry)
	if err != nil {
		return nil, err
	}
	return d.reply(rep), nil
}

// ParentEdit re-renders the parent after an action (a silence made or
// ended), so it shows the silence while it holds; recorded with ActionDone.
type ParentEdit struct{ ID string }

func (ParentEdit) kind() opKind  { return opUpdate }
func (o ParentEdit) Key() string { return notify.KeyActionEdit + o.ID }
func (ParentEdit) ref() string   { return "" }

func (o ParentEdit) prepare(ctx context.Context, d delivery) (sendFunc, error) {
	sum, err := d.src.Summary(ctx, d.runID, d.key, d.retry)
	if err != nil {
		return nil, err
	}
	return d.edit(sum), nil
}

// decodeAction reads an action's reply back from its ref.
func decodeAction(ref string) (Op, bool) {
	id, ok := strings.CutPrefix(ref, actionRefPrefix)
	return ActionDone{ID: id}, ok && id != ""
}
