package slackstub

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
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

// upload is a file announced with files.getUploadURLExternal.
type upload struct {
	File
	length    int
	bot       *bot
	uploaded  bool
	completed bool
}

// File is a file shared in a message.
type File struct {
	ID, Name, Title string
	Size            int
	Content         []byte
}

func (s *Server) getUploadURL(b *bot, p url.Values) (map[string]any, *apiError) {
	n, err := strconv.Atoi(p.Get("length"))
	if p.Get("filename") == "" || err != nil || n < 1 {
		return nil, errf("invalid_arguments", "[ERROR] filename and a positive length are required")
	}
	s.nextFile++
	id := fmt.Sprintf("F%010d", s.nextFile)
	s.uploads[id] = &upload{File: File{ID: id, Name: p.Get("filename")}, length: n, bot: b}
	return map[string]any{"upload_url": s.srv.URL + "/upload/v1/" + id, "file_id": id}, nil
}

// serveUpload takes the bytes POSTed to an upload_url, raw or as a multipart "file" part.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	data, err := uploadBody(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	_, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	call := Call{Method: "upload", At: s.now(), Outcome: OutcomeAPIError,
		Request: Request{HTTPMethod: r.Method, ContentType: mt, HasBody: len(data) > 0, Bearer: bearer}}
	f := s.fault("upload", call.At)
	if f != nil && f.kind != kindDropAfter {
		call.Outcome = f.answer(w)
		s.calls = append(s.calls, call)
		return
	}
	u := s.uploads[r.PathValue("file")]
	status, answer := http.StatusOK, fmt.Sprintf("OK - %d", len(data))
	switch {
	case u == nil || u.uploaded:
		status, answer = http.StatusNotFound, "no such upload"
	case err != nil || len(data) != u.length:
		status, answer = http.StatusBadRequest, fmt.Sprintf("length mismatch: announced %d, got %d (%v)", u.length, len(data), err)
	default:
		u.Content, u.Size, u.uploaded = data, len(data), true
		call.Outcome = OutcomeOK
	}
	if status != http.StatusOK {
		call.Error = answer
	}
	s.calls = append(s.calls, call)
	if f != nil {
		s.calls[len(s.calls)-1].Outcome = OutcomeDroppedLate
		drop(w)
		return
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, answer)
}

func uploadBody(r *http.Request) ([]byte, error) {
	mt, ps, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return io.ReadAll(r.Body)
	}
	mr := multipart.NewReader(r.Body, ps["boundary"])
	for {
		part, err := mr.NextPart()
		if err != nil {
			return nil, fmt.Errorf("no file part: %w", err)
		}
		if part.FormName() == "file" {
			return io.ReadAll(part)
		}
	}
}

func (s *Server) completeUpload(b *bot, p url.Values) (map[string]any, *apiError) {
	var want []struct{ ID, Title string }
	if err := json.Unmarshal([]byte(p.Get("files")), &want); err != nil || len(want) == 0 {
		return nil, errf("invalid_arguments", "[ERROR] files must be a non-empty JSON array of {id, title}")
	}
	var ch *channel
	var parent *message
	if id := p.Get("channel_id"); id != "" {
		if ch = s.channel(id); ch == nil || ch.id != id {
			return nil, errf("channel_not_found")
		}
	}
	if tts := p.Get("thread_ts"); tts != "" {
		if ch == nil {
			return nil, errf("invalid_arguments", "[ERROR] thread_ts needs channel_id")
		}
		if parent = ch.byTS[tts]; parent == nil || parent.parent != nil {
			return nil, errf("invalid_thread_ts")
		}
	}
	var files []File
	var summary []map[string]any
	seen := map[string]bool{}
	for _, w := range want {
		u := s.uploads[w.ID]
		if u == nil || u.bot != b || !u.uploaded || u.completed || seen[w.ID] {
			return nil, errf("file_not_found", "[ERROR] "+w.ID+" is not an uploaded, uncompleted file of this app")
		}
		seen[w.ID] = true
		u.Title = w.Title
		if u.Title == "" {
			u.Title = u.Name
		}
		files = append(files, u.File)
		summary = append(summary, map[string]any{"id": u.ID, "title": u.Title})
	}
	for _, w := range want {
		s.uploads[w.ID].completed = true
	}
	if ch != nil {
		m := s.add(ch, parent, b, Revision{Text: p.Get("initial_comment")})
		m.files = files
	}
	return map[string]any{"files": summary}, nil
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
