package slackstub

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// history answers conversations.history: top-level messages, newest first.
func (s *Server) history(_ *bot, p url.Values) (map[string]any, *apiError) {
	ch, aerr := s.channelByID(p)
	if aerr != nil {
		return nil, aerr
	}
	var top []*message
	for i := len(ch.msgs) - 1; i >= 0; i-- {
		if m := ch.msgs[i]; m.parent == nil && inRange(m.ts, p) {
			top = append(top, m)
		}
	}
	page, more, aerr := paginate(top, p, false)
	if aerr != nil {
		return nil, aerr
	}
	return s.answerPage(page, more, p), nil
}

// replies answers conversations.replies: the parent first, then its replies in order.
func (s *Server) replies(_ *bot, p url.Values) (map[string]any, *apiError) {
	ch, aerr := s.channelByID(p)
	if aerr != nil {
		return nil, aerr
	}
	m := ch.byTS[p.Get("ts")]
	if m == nil {
		return nil, errf("thread_not_found")
	}
	if m.parent != nil { // a reply's ts names just that reply
		return s.answerPage([]*message{m}, nil, p), nil
	}
	var rs []*message
	for _, r := range m.replies {
		if inRange(r.ts, p) {
			rs = append(rs, r)
		}
	}
	page, more, aerr := paginate(rs, p, true)
	if aerr != nil {
		return nil, aerr
	}
	return s.answerPage(append([]*message{m}, page...), more, p), nil
}

func (s *Server) channelByID(p url.Values) (*channel, *apiError) {
	ch := s.channel(p.Get("channel"))
	if ch == nil || ch.id != p.Get("channel") {
		return nil, errf("channel_not_found")
	}
	return ch, nil
}

// inRange applies oldest, latest and inclusive (exclusive unless inclusive is true).
func inRange(ts string, p url.Values) bool {
	incl := p.Get("inclusive") == "1" || p.Get("inclusive") == "true"
	t := micros(ts)
	if o := p.Get("oldest"); o != "" && (t < micros(o) || (!incl && t == micros(o))) {
		return false
	}
	if l := p.Get("latest"); l != "" && (t > micros(l) || (!incl && t == micros(l))) {
		return false
	}
	return true
}

// micros parses a ts such as "1700000000.000100" (or "0", "1700000000.5").
func micros(ts string) int64 {
	sec, frac, _ := strings.Cut(ts, ".")
	n, _ := strconv.ParseInt(sec, 10, 64)
	frac = (frac + "000000")[:6]
	f, _ := strconv.ParseInt(frac, 10, 64)
	return n*1e6 + f
}

// paginate cuts msgs (newest first, or oldest first for a thread) by cursor
// and limit (Slack's default 100, at most 999); for a thread the parent
// takes one place on each page.
func paginate(msgs []*message, p url.Values, thread bool) ([]*message, *message, *apiError) {
	limit := 100
	if l := p.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return nil, nil, errf("invalid_limit")
		}
		limit = min(n, 999)
	}
	if thread {
		limit = max(limit-1, 1)
	}
	start := 0
	if c := p.Get("cursor"); c != "" {
		raw, err := base64.StdEncoding.DecodeString(c)
		ts, ok := strings.CutPrefix(string(raw), "next_ts:")
		if err != nil || !ok || !tsPattern.MatchString(ts) {
			return nil, nil, errf("invalid_cursor")
		}
		// history runs newest first, a thread oldest first: resume at the cursor's place
		for c := micros(ts); start < len(msgs); start++ {
			if t := micros(msgs[start].ts); (thread && t >= c) || (!thread && t <= c) {
				break
			}
		}
	}
	end := min(start+limit, len(msgs))
	var next *message
	if end < len(msgs) {
		next = msgs[end]
	}
	return msgs[start:end], next, nil
}

func (s *Server) answerPage(page []*message, next *message, p url.Values) map[string]any {
	withMeta := p.Get("include_all_metadata") == "1" || p.Get("include_all_metadata") == "true"
	out := []map[string]any{}
	for _, m := range page {
		out = append(out, m.json(withMeta))
	}
	body := map[string]any{"messages": out, "has_more": next != nil, "pin_count": 0}
	if next != nil {
		body["response_metadata"] = map[string]any{"next_cursor": base64.StdEncoding.EncodeToString([]byte("next_ts:" + next.ts))}
	}
	return body
}

// Message is a recorded message with its current content, for assertions.
type Message struct {
	Channel, TS, ThreadTS string // ThreadTS is empty for a top-level message
	User, BotID           string
	Revision                         // the current content
	Revisions             []Revision // every version, oldest first: one more than the updates
	Files                 []File
	Replies               []Message // for a top-level message, in order
}

// Messages returns the top-level messages of a channel (id or name) in
// order, each with its replies; nil for an unknown channel.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channel(channel)
	if ch == nil {
		return nil
	}
	var out []Message
	for _, m := range ch.msgs {
		if m.parent == nil {
			out = append(out, m.snapshot())
		}
	}
	return out
}

func (m *message) snapshot() Message {
	out := Message{Channel: m.ch.id, TS: m.ts, User: m.bot.userID, BotID: m.bot.botID, Revision: m.cur(),
		Revisions: append([]Revision(nil), m.revisions...), Files: append([]File(nil), m.files...)}
	if m.parent != nil {
		out.ThreadTS = m.parent.ts
	}
	for _, r := range m.replies {
		out.Replies = append(out.Replies, r.snapshot())
	}
	return out
}

// Dump renders every channel's conversation as text, for test failures.
func (s *Server) Dump() string {
	var b strings.Builder
	for _, c := range s.channels {
		fmt.Fprintf(&b, "#%s (%s)\n", c.name, c.id)
		for _, m := range s.Messages(c.id) {
			dumpMessage(&b, m, "  ")
			for _, r := range m.Replies {
				dumpMessage(&b, r, "    ↳ ")
			}
		}
	}
	return b.String()
}

func dumpMessage(b *strings.Builder, m Message, indent string) {
	fmt.Fprintf(b, "%s%s %s: %q", indent, m.TS, m.User, m.Text)
	if m.Blocks != nil {
		var bl []json.RawMessage
		_ = json.Unmarshal(m.Blocks, &bl)
		fmt.Fprintf(b, " [%d blocks]", len(bl))
	}
	if m.Metadata != nil {
		payload, _ := json.Marshal(m.Metadata.EventPayload)
		fmt.Fprintf(b, " [metadata %s %s]", m.Metadata.EventType, payload)
	}
	if n := len(m.Revisions) - 1; n > 0 {
		fmt.Fprintf(b, " [edited %d×]", n)
	}
	for _, f := range m.Files {
		fmt.Fprintf(b, " [file %s %q %d B]", f.Name, f.Title, f.Size)
	}
	b.WriteString("\n")
}

// list answers conversations.list: the workspace's channels (all public here)
// in the order they were made, a page of limit (default 100, at most 1000)
// at a time.
func (s *Server) list(_ *bot, p url.Values) (map[string]any, *apiError) {
	public := p.Get("types") == ""
	for _, t := range strings.Split(p.Get("types"), ",") {
		switch t {
		case "public_channel":
			public = true
		case "private_channel", "mpim", "im", "":
		default:
			return nil, errf("invalid_types")
		}
	}
	limit := 100
	if l := p.Get("limit"); l != "" {
		n, _ := strconv.Atoi(l)
		if n < 1 || n > 1000 {
			return nil, errf("invalid_limit")
		}
		limit = n
	}
	start := 0
	if c := p.Get("cursor"); c != "" {
		raw, err := base64.StdEncoding.DecodeString(c)
		idx, ok := strings.CutPrefix(string(raw), "next_idx:")
		n, aerr := strconv.Atoi(idx)
		if err != nil || !ok || aerr != nil || n < 0 || n > len(s.channels) {
			return nil, errf("invalid_cursor")
		}
		start = n
	}
	out, next := []map[string]any{}, ""
	if public {
		end := min(start+limit, len(s.channels))
		for _, c := range s.channels[start:end] {
			out = append(out, map[string]any{"id": c.id, "name": c.name, "name_normalized": c.name, "is_channel": true,
				"is_private": false, "is_archived": false, "is_member": true})
		}
		if end < len(s.channels) {
			next = base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("next_idx:%d", end)))
		}
	}
	return map[string]any{"channels": out, "response_metadata": map[string]any{"next_cursor": next}}, nil
}
