package slackstub

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"time"
	"unicode/utf8"
)

// message is a stored message; revisions[len-1] is its current content.
type message struct {
	ch        *channel
	ts        string
	parent    *message // nil for a top-level message
	bot       *bot
	revisions []Revision
	files     []File
	replies   []*message
}

// Revision is one version of a message: as posted, then after each update.
type Revision struct {
	At       time.Time
	Text     string
	Blocks   json.RawMessage // nil: no blocks
	Metadata *Metadata
}

// Metadata is a message's metadata as Slack stores it.
type Metadata struct {
	EventType    string         `json:"event_type"`
	EventPayload map[string]any `json:"event_payload"`
}

func (m *message) cur() Revision { return m.revisions[len(m.revisions)-1] }

const maxTextChars = 40000

var tsPattern = regexp.MustCompile(`^\d{10}\.\d{6}$`)

func (s *Server) postMessage(b *bot, p url.Values) (map[string]any, *apiError) {
	ch := s.channel(p.Get("channel"))
	if ch == nil {
		return nil, errf("channel_not_found")
	}
	rev, aerr := s.content(p, Revision{}, false)
	if aerr != nil {
		return nil, aerr
	}
	var parent *message
	if tts := p.Get("thread_ts"); tts != "" {
		if parent = ch.byTS[tts]; parent == nil || parent.parent != nil {
			return nil, errf("invalid_thread_ts", fmt.Sprintf("[ERROR] %s is not a top-level message of %s", tts, ch.id))
		}
	}
	m := s.add(ch, parent, b, rev)
	return map[string]any{"channel": ch.id, "ts": m.ts, "message": m.json(true)}, nil
}

// add records a new message in ch (a reply when parent is set).
func (s *Server) add(ch *channel, parent *message, b *bot, rev Revision) *message {
	rev.At = s.now()
	m := &message{ch: ch, ts: s.nextTS(), parent: parent, bot: b, revisions: []Revision{rev}}
	ch.msgs = append(ch.msgs, m)
	ch.byTS[m.ts] = m
	if parent != nil {
		parent.replies = append(parent.replies, m)
	}
	return m
}

// content reads text, blocks and metadata over prev, as chat.postMessage
// and chat.update (update set) do: text without blocks drops the blocks,
// omitted metadata is kept, metadata without an event_type removes it.
func (s *Server) content(p url.Values, prev Revision, update bool) (Revision, *apiError) {
	rev := prev
	_, hasText := p["text"]
	_, hasBlocks := p["blocks"]
	if hasText {
		rev.Text = p.Get("text")
		if !hasBlocks {
			rev.Blocks = nil
		}
	}
	if hasBlocks {
		raw := json.RawMessage(p.Get("blocks"))
		if aerr := validateBlocks(raw); aerr != nil {
			return rev, aerr
		}
		rev.Blocks = raw
		if string(raw) == "[]" {
			rev.Blocks = nil
		}
	}
	if p.Get("text") == "" && (!hasBlocks || rev.Blocks == nil) && p.Get("attachments") == "" {
		return rev, errf("no_text")
	}
	if utf8.RuneCountInString(rev.Text) > maxTextChars {
		return rev, errf("msg_too_long")
	}
	if raw, ok := p["metadata"]; ok {
		var md Metadata
		if err := json.Unmarshal([]byte(raw[0]), &md); err != nil {
			return rev, errf("invalid_metadata_format", err.Error())
		}
		rev.Metadata = &md
		if md.EventType == "" {
			if !update {
				return rev, errf("invalid_metadata_schema", "[ERROR] missing required field: event_type")
			}
			rev.Metadata = nil
		}
	}
	return rev, nil
}

func (s *Server) update(b *bot, p url.Values) (map[string]any, *apiError) {
	ch := s.channel(p.Get("channel"))
	if ch == nil || ch.id != p.Get("channel") {
		return nil, errf("channel_not_found")
	}
	m := ch.byTS[p.Get("ts")]
	if m == nil {
		return nil, errf("message_not_found")
	}
	if m.bot != b {
		return nil, errf("cant_update_message")
	}
	rev, aerr := s.content(p, m.cur(), true)
	if aerr != nil {
		return nil, aerr
	}
	rev.At = s.now()
	m.revisions = append(m.revisions, rev)
	return map[string]any{"channel": ch.id, "ts": m.ts, "text": rev.Text, "message": m.json(true)}, nil
}

// json renders m as conversations.history and chat.postMessage answer it.
func (m *message) json(withMetadata bool) map[string]any {
	r := m.cur()
	out := map[string]any{"type": "message", "ts": m.ts, "user": m.bot.userID, "bot_id": m.bot.botID,
		"app_id": "A" + m.bot.botID[1:], "team": "T0001", "text": r.Text}
	if r.Blocks != nil {
		out["blocks"] = r.Blocks
	}
	if withMetadata && r.Metadata != nil {
		out["metadata"] = r.Metadata
	}
	if len(m.revisions) > 1 {
		out["edited"] = map[string]any{"user": m.bot.userID, "ts": fmt.Sprintf("%d.000000", r.At.Unix())}
	}
	if m.parent != nil {
		out["thread_ts"], out["parent_user_id"] = m.parent.ts, m.parent.bot.userID
	} else if n := len(m.replies); n > 0 {
		users := []string{}
		for _, rp := range m.replies {
			if !contains(users, rp.bot.userID) {
				users = append(users, rp.bot.userID)
			}
		}
		out["thread_ts"], out["reply_count"], out["latest_reply"] = m.ts, n, m.replies[n-1].ts
		out["reply_users"], out["reply_users_count"] = users, len(users)
	}
	if len(m.files) > 0 {
		var fs []map[string]any
		for _, f := range m.files {
			fs = append(fs, map[string]any{"id": f.ID, "name": f.Name, "title": f.Title, "size": f.Size,
				"mimetype": "application/octet-stream", "user": m.bot.userID})
		}
		out["files"], out["upload"], out["display_as_bot"] = fs, true, false
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Block limits, from Slack's Block Kit reference.
const (
	maxBlocks       = 50
	maxSectionText  = 3000
	maxSectionField = 2000
	maxFields       = 10
	maxHeaderText   = 150
	maxMarkdownText = 12000
	maxBlockID      = 255
)

var blockTypes = map[string]bool{"actions": true, "context": true, "context_actions": true, "divider": true,
	"file": true, "header": true, "image": true, "input": true, "markdown": true, "rich_text": true,
	"section": true, "table": true, "video": true}

// validateBlocks checks a blocks argument's shape and the limits Slack enforces.
func validateBlocks(raw json.RawMessage) *apiError {
	var blocks []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return errf("invalid_blocks_format", "[ERROR] blocks must be a JSON array of objects")
	}
	if len(blocks) > maxBlocks {
		return errf("invalid_blocks", fmt.Sprintf("[ERROR] no more than %d items allowed [json-pointer:/blocks]", maxBlocks))
	}
	ids := map[string]bool{}
	for i, b := range blocks {
		at := fmt.Sprintf("/blocks/%d", i)
		var typ, id string
		_ = json.Unmarshal(b["type"], &typ)
		if !blockTypes[typ] {
			return invalid(at+"/type", "unknown block type %q", typ)
		}
		if b["block_id"] != nil {
			if json.Unmarshal(b["block_id"], &id) != nil || id == "" || len(id) > maxBlockID || ids[id] {
				return invalid(at+"/block_id", "block_id must be a unique string of 1 to %d characters", maxBlockID)
			}
			ids[id] = true
		}
		if aerr := validateBlock(typ, b, at); aerr != nil {
			return aerr
		}
	}
	return nil
}

func validateBlock(typ string, b map[string]json.RawMessage, at string) *apiError {
	switch typ {
	case "section":
		var fields []json.RawMessage
		_ = json.Unmarshal(b["fields"], &fields)
		if b["text"] == nil && len(fields) == 0 {
			return invalid(at, "a section must have text or fields")
		}
		if b["text"] != nil {
			if aerr := textObject(b["text"], at+"/text", maxSectionText, false); aerr != nil {
				return aerr
			}
		}
		if len(fields) > maxFields {
			return invalid(at+"/fields", "no more than %d items allowed", maxFields)
		}
		for j, f := range fields {
			if aerr := textObject(f, fmt.Sprintf("%s/fields/%d", at, j), maxSectionField, false); aerr != nil {
				return aerr
			}
		}
	case "header":
		return textObject(b["text"], at+"/text", maxHeaderText, true)
	case "markdown":
		var text string
		if json.Unmarshal(b["text"], &text) != nil || text == "" || utf8.RuneCountInString(text) > maxMarkdownText {
			return invalid(at+"/text", "must be a string of 1 to %d characters", maxMarkdownText)
		}
	case "context", "actions", "rich_text":
		limit := map[string]int{"context": 10, "actions": 25, "rich_text": 1 << 20}[typ]
		var els []json.RawMessage
		if json.Unmarshal(b["elements"], &els) != nil || len(els) == 0 || len(els) > limit {
			return invalid(at+"/elements", "must be an array of 1 to %d items", limit)
		}
	case "image":
		if b["image_url"] == nil && b["slack_file"] == nil {
			return invalid(at, "an image needs image_url or slack_file")
		}
		var alt string
		if json.Unmarshal(b["alt_text"], &alt) != nil || alt == "" {
			return invalid(at+"/alt_text", "missing required field: alt_text")
		}
	}
	return nil
}

// textObject checks a composition text object of at most limit characters.
func textObject(raw json.RawMessage, at string, limit int, plainOnly bool) *apiError {
	var t struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if raw == nil || json.Unmarshal(raw, &t) != nil || t.Text == nil {
		return invalid(at, "must be a text object with type and text")
	}
	if t.Type != "plain_text" && (plainOnly || t.Type != "mrkdwn") {
		return invalid(at+"/type", "unsupported text type %q", t.Type)
	}
	if n := utf8.RuneCountInString(*t.Text); n == 0 || n > limit {
		return invalid(at+"/text", "must be more than 0 and less than %d characters", limit+1)
	}
	return nil
}

func invalid(pointer, format string, args ...any) *apiError {
	return errf("invalid_blocks", fmt.Sprintf("[ERROR] %s [json-pointer:%s]", fmt.Sprintf(format, args...), pointer))
}
