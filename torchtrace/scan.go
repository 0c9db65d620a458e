package torchtrace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxElement bounds one JSON value held in memory at once: a trace event, or
// a top-level value other than traceEvents (deviceProperties, metadata).
// Kineto's largest events (a python_function with a long stack, a kernel
// with many args) are a few KiB.
const maxElement = 16 << 20

// scanner walks a JSON document as a stream. It never holds more than the
// value being read (bounded by maxElement) plus one read block, so a file of
// any size is read in constant memory: values are cut out of the stream by
// counting brackets outside strings, and each event is handed to a real JSON
// parser on its own.
type scanner struct {
	r        io.Reader
	buf      []byte
	pos, end int   // buf[pos:end] is read but not consumed
	off      int64 // stream offset of buf[0]
	rerr     error // sticky read error (io.EOF at the end)
}

const readBlock = 1 << 20

func newScanner(r io.Reader) *scanner {
	return &scanner{r: r, buf: make([]byte, 2*readBlock)}
}

// offset is how many bytes have been consumed.
func (s *scanner) offset() int64 { return s.off + int64(s.pos) }

// more reads at least one more byte into buf, keeping buf[keep:end]
// (keep <= pos); it moves the kept bytes to the front and grows buf when
// needed. It returns the shift applied to indexes into buf, or an error.
func (s *scanner) more(keep int) (shift int, err error) {
	if s.rerr != nil {
		return 0, s.rerr
	}
	if keep > 0 {
		n := copy(s.buf, s.buf[keep:s.end])
		s.off += int64(keep)
		s.pos -= keep
		s.end = n
		shift = keep
	}
	if len(s.buf)-s.end < readBlock {
		if s.end+readBlock > maxElement+2*readBlock {
			return shift, fmt.Errorf("a JSON value at byte %d is larger than %d MiB", s.off, maxElement>>20)
		}
		nb := make([]byte, 2*len(s.buf))
		copy(nb, s.buf[:s.end])
		s.buf = nb
	}
	for {
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		if err != nil {
			s.rerr = err
		}
		if n > 0 {
			return shift, nil
		}
		if err != nil {
			return shift, err
		}
	}
}

// peek skips white space and returns the next byte without consuming it.
func (s *scanner) peek() (byte, error) {
	for {
		for s.pos < s.end {
			switch c := s.buf[s.pos]; c {
			case ' ', '\t', '\n', '\r':
				s.pos++
			default:
				return c, nil
			}
		}
		if _, err := s.more(s.pos); err != nil {
			return 0, err
		}
	}
}

// expect consumes the next non-space byte, which must be c.
func (s *scanner) expect(c byte) error {
	got, err := s.peek()
	if err != nil {
		return err
	}
	if got != c {
		return s.syntax(fmt.Sprintf("want %q, found %q", c, got))
	}
	s.pos++
	return nil
}

func (s *scanner) syntax(msg string) error {
	return &syntaxError{Offset: s.offset(), Msg: msg}
}

type syntaxError struct {
	Offset int64
	Msg    string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

// structural marks the bytes the value scanner stops at outside strings.
var structural = func() (t [256]bool) {
	for _, c := range []byte(`{}[]",`) {
		t[c] = true
	}
	for _, c := range []byte(" \t\r\n:") {
		t[c] = true
	}
	return t
}()

// value consumes the next JSON value. With keep, it returns the value's
// bytes, valid until the next call; without, the bytes are dropped as they
// are passed (a skipped value may be of any size).
func (s *scanner) value(keep bool) ([]byte, error) {
	c, err := s.peek()
	if err != nil {
		return nil, err
	}
	start := s.pos
	i := s.pos
	depth := 0
	inStr := false
	strStart := start // the opening quote of the string being read
	scalar := c != '{' && c != '[' && c != '"'
	if c == '"' {
		inStr = true
		i++
	}
	for {
		if i >= s.end {
			keepFrom := start
			if !keep {
				keepFrom = i
				if inStr {
					keepFrom = strStart
				}
				s.pos = keepFrom
			}
			shift, err := s.more(keepFrom)
			i -= shift
			start -= shift
			strStart -= shift
			if err != nil {
				if errors.Is(err, io.EOF) {
					if scalar && i > start {
						break // a bare number at the very end
					}
					err = io.ErrUnexpectedEOF
				}
				s.pos = i
				return nil, err
			}
			continue
		}
		if inStr {
			j := bytes.IndexByte(s.buf[i:s.end], '"')
			if j < 0 {
				i = s.end
				continue
			}
			i += j
			// An escaped quote has an odd run of backslashes before it.
			bs := 0
			for k := i - 1; k > strStart && s.buf[k] == '\\'; k-- {
				bs++
			}
			i++
			if bs%2 == 1 {
				continue
			}
			inStr = false
			if depth == 0 {
				break
			}
			continue
		}
		b := s.buf[i]
		if scalar {
			if structural[b] {
				break
			}
			i++
			continue
		}
		i++
		switch b {
		case '"':
			inStr = true
			strStart = i - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				goto done
			}
			if depth < 0 {
				s.pos = i - 1
				return nil, s.syntax(fmt.Sprintf("unexpected %q", b))
			}
		}
	}
done:
	s.pos = i
	if !keep {
		return nil, nil
	}
	return s.buf[start:i], nil
}

// str reads a JSON string (an object key) and returns it unquoted; keys with
// escapes are returned raw, which is enough to match the names we look for.
func (s *scanner) str() (string, error) {
	c, err := s.peek()
	if err != nil {
		return "", err
	}
	if c != '"' {
		return "", s.syntax(fmt.Sprintf("want a key, found %q", c))
	}
	b, err := s.value(true)
	if err != nil {
		return "", err
	}
	return string(b[1 : len(b)-1]), nil
}
