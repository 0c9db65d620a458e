package slack

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/notify"
)

// maxUpload bounds a file read from storage for upload (charts are kilobytes).
const maxUpload = 32 << 20

// Reply posts one finished step into the thread, then uploads its files. With
// r.Retry it first reads the thread: a reply already there with r.Key is not
// posted again, and only files not yet shared (by title) are uploaded.
func (n *Notifier) Reply(ctx context.Context, t notify.Thread, r notify.StepReport) error {
	if !shown(r, n.postSkipped) {
		return nil
	}
	msg := n.withRepeat(RenderReply(r), r)
	if r.Change != "" { // the refined verdict differs from the preliminary one
		msg = RenderVerdictChange(r)
	}
	if r.Member != nil { // a group member's one compact reply
		msg = RenderMemberReply(*r.Member)
	}
	if r.Notice != "" { // about the run, not a step
		msg = RenderNotice(r)
	}
	return n.post(ctx, t, r.RunID, r.Key, msg, r.Retry)
}

// Close re-renders the parent with the outcome (chat.update, idempotent by
// nature) and, when the run finished or its alert resolved, posts a reply
// with s.Key (looked up first with s.Retry). The parent is rebuilt from s.Run
// when the caller gives it (the outbox does); only without it is the parent's
// metadata read back from Slack (conversations.history, a tier-3 method).
func (n *Notifier) Close(ctx context.Context, t notify.Thread, s notify.Summary) error {
	log := n.log.With(zap.String("run", s.RunID), zap.String("key", s.Key))
	var p Parent
	if s.Run != nil {
		p = n.parentOf(*s.Run, log)
	} else {
		var ok bool
		var err error
		if p, ok, err = n.parentState(ctx, t, s.RunID); err != nil {
			return err
		}
		if !ok {
			log.Warn("The parent's metadata could not be read back; it is re-rendered from the outcome alone.", zap.String("ts", t.TS))
		}
		p.Links = n.freshLinks(s.RunID, p.Links)
	}
	p = p.Apply(s)
	p.AskFeedback, p.AskSilence, p.AskProfile = n.feedback, n.silence, n.profile
	msg := RenderParent(p)
	if s.Group != nil { // the thread is a storm's or a fleet's: its parent shows the group
		msg = RenderGroupParent(*s.Group, p)
	}
	opts := n.msgOptions(msg, s.RunID, notify.KeyOpen, parentPayload(p))
	if _, _, _, err := n.api.UpdateMessageContext(ctx, t.Channel, t.TS, opts...); err != nil {
		return n.fail(err, "chat.update: parent %s of run %s in %s (%s)", t.TS, s.RunID, t.Channel, s.Key)
	}
	log.Info("Updated the run's parent with its outcome.", zap.String("status", string(p.Status)))
	if notify.EditOnly(s.Key) {
		return nil
	}
	return n.post(ctx, t, s.RunID, s.Key, RenderCloseReply(p, s), s.Retry)
}

// post puts one reply with its uploads into the thread, at most once per key.
func (n *Notifier) post(ctx context.Context, t notify.Thread, runID, key string, msg Message, retry bool) error {
	log := n.log.With(zap.String("run", runID), zap.String("key", key))
	st := threadState{titles: map[string]bool{}}
	if retry {
		var err error
		if st, err = n.findReply(ctx, t, runID, key); err != nil {
			return err
		}
	}
	if st.found {
		log.Info("Found the reply an earlier attempt posted; not posting it again.")
	} else {
		if err := n.pace.wait(ctx, t.Channel); err != nil {
			return n.fail(err, "reply %s of run %s in %s: wait for the pace", key, runID, t.Channel)
		}
		opts := append(n.postOptions(msg, runID, key, nil), slack.MsgOptionTS(t.TS))
		if _, _, err := n.api.PostMessageContext(ctx, t.Channel, opts...); err != nil {
			return n.fail(err, "chat.postMessage: reply %s of run %s in %s/%s", key, runID, t.Channel, t.TS)
		}
	}
	for _, u := range msg.Uploads {
		if st.titles[u.Title] {
			continue
		}
		if err := n.upload(ctx, t, runID, u); err != nil {
			return err
		}
	}
	return nil
}

// upload shares one file in the thread: Slack's three-step flow
// (files.getUploadURLExternal, the bytes, files.completeUploadExternal).
func (n *Notifier) upload(ctx context.Context, t notify.Thread, runID string, u Upload) error {
	data := []byte(u.Content)
	if u.Key != "" {
		if n.store == nil {
			return fmt.Errorf("slack: upload %s of run %s: no artifact store to read it from", u.Name, runID)
		}
		rc, err := n.store.Open(ctx, u.Key)
		if err != nil {
			return fmt.Errorf("slack: upload %s of run %s: read %s: %w", u.Name, runID, u.Key, err)
		}
		data, err = io.ReadAll(io.LimitReader(rc, maxUpload+1))
		rc.Close()
		if err != nil {
			return fmt.Errorf("slack: upload %s of run %s: read %s: %w", u.Name, runID, u.Key, err)
		}
		if len(data) > maxUpload {
			n.log.Warn("A file is too large to upload; the reply links it instead.", zap.String("run", runID), zap.String("file", u.Name))
			return nil
		}
	}
	if len(data) == 0 {
		n.log.Warn("A file is empty; Slack takes no empty upload.", zap.String("run", runID), zap.String("file", u.Name))
		return nil
	}
	if err := n.pace.wait(ctx, t.Channel); err != nil {
		return n.fail(err, "upload %s of run %s: wait for the pace", u.Name, runID)
	}
	_, err := n.api.UploadFileContext(ctx, slack.UploadFileParameters{Filename: u.Name, Title: u.Title,
		FileSize: len(data), Reader: bytes.NewReader(data), Channel: t.Channel, ThreadTimestamp: t.TS})
	if err != nil {
		return n.fail(err, "upload %s of run %s to %s/%s", u.Name, runID, t.Channel, t.TS)
	}
	n.log.Info("Uploaded a file into the thread.", zap.String("run", runID), zap.String("file", u.Name), zap.Int("bytes", len(data)))
	return nil
}
