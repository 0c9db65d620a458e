package slackstub

import (
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
	// check has seen filename and an integer length; Slack's docs give
	// missing_argument for a length of 0 (and no more for a negative one).
	n, _ := strconv.Atoi(p.Get("length"))
	if n < 1 {
		return nil, errf("missing_argument")
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
		if ch = s.channel(id); ch == nil || ch.id != id { // the method's docs list invalid_channel, not channel_not_found
			return nil, errf("invalid_channel")
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
