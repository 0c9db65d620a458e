package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/agent"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/torchtrace"
	"github.com/autocapture/autocapture/vocab"
)

// profileSource is where the profiler's files are read from: a local folder
// (agent.Dir) or a sidecar (agent.Client). Both have these methods.
type profileSource interface {
	List(ctx context.Context, since time.Time) ([]agent.File, error)
	Open(ctx context.Context, name string) (io.ReadCloser, error)
	Remove(ctx context.Context, name string) error
}

// source is the step's collect source, or nil when none is configured.
func (p *Profile) source(in *vocab.Input) (profileSource, error) {
	switch c := p.cfg.Collect; {
	case c.Dir != "":
		return agent.Dir{Path: c.Dir}, nil
	case c.Agent != "":
		if in.Env.Profiling.AgentToken == "" {
			return nil, vocab.NotConfigured("no agent token (set profiling.agent_token_file: the token the agent at %s takes)", c.Agent)
		}
		return &agent.Client{URL: baseURL(c.Agent), Token: in.Env.Profiling.AgentToken, HTTP: in.Env.Targets}, nil
	}
	return nil, nil
}

// listing is a source's files by name with their sizes: what the step saves
// with the recording, so a resumed step diffs against the same picture. The
// diff is clock-free (name and size, never mtimes: a server's clock is not ours).
type listing map[string]int64

func listingOf(files []agent.File) listing {
	l := make(listing, len(files))
	for _, f := range files {
		l[f.Name] = f.Size
	}
	return l
}

// listSource lists every file of src (nil src: an empty listing).
func listSource(ctx context.Context, src profileSource) (listing, error) {
	if src == nil {
		return listing{}, nil
	}
	files, err := src.List(ctx, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("list the profiler's files: %w", err)
	}
	return listingOf(files), nil
}

// wanted is what the capture produced: files that appeared or changed size
// since before, of the kinds expect writes (for SGLang, named with this
// capture's prefix), sorted by name.
func (p *Profile) wanted(before, now listing, prefix string) []agent.File {
	var out, bare []agent.File
	for name, size := range now {
		if old, ok := before[name]; ok && old == size {
			continue
		}
		if p.cfg.Expect == ExpectCUDA && !strings.HasSuffix(name, ".nsys-rep") {
			continue
		}
		if p.cfg.Engine == vocab.EngineSGLang && p.cfg.Expect == ExpectTorch && !sglangOwns(name, prefix) {
			if sglangUnprefixed(name) {
				bare = append(bare, agent.File{Name: name, Size: size})
			}
			continue // another capture's, or a half-written export's temporary
		}
		out = append(out, agent.File{Name: name, Size: size})
	}
	if len(out) == 0 {
		// No file took the prefix: a build that ignores profile_prefix
		// names them "<profile_id>-TP-<r>…"; the new ones are this frame's.
		out = bare
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// settle waits until the new files stop changing: the same names and sizes
// in two polls in a row (and, for torch, at least one file: vLLM may write
// after stop_profile answered). It gives up after the tuning's settle bound
// and returns what it last saw.
func (p *Profile) settle(ctx context.Context, src profileSource, before listing, prefix string) ([]agent.File, bool, error) {
	deadline := time.Now().Add(p.tune.settle)
	var last []agent.File
	stableOnce := false
	for {
		now, err := listSource(ctx, src)
		if err != nil {
			return last, false, err
		}
		cur := p.wanted(before, now, prefix)
		if last != nil && sameFiles(cur, last) && (len(cur) > 0 || p.cfg.Expect == ExpectCUDA) {
			if stableOnce {
				return cur, true, nil
			}
			stableOnce = true
		} else {
			stableOnce = false
		}
		last = cur
		if time.Now().After(deadline) {
			return last, false, nil
		}
		if err := stepkit.SleepCtx(ctx, p.tune.poll); err != nil {
			return last, false, err
		}
	}
}

func sameFiles(a, b []agent.File) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Size != b[i].Size {
			return false
		}
	}
	return true
}

// collected is one file's outcome.
type collected struct {
	Name     string             `json:"name"`
	Bytes    int64              `json:"bytes"`
	Artifact *vocab.Artifact    `json:"-"`
	Report   *torchtrace.Report `json:"-"`
	// Analysis says why a trace was not read (not a trace, a parse error).
	Analysis string `json:"analysis,omitempty"`
	Error    string `json:"error,omitempty"`
	Removed  bool   `json:"removed,omitempty"`
}

// isTrace says whether a file is a Chrome trace worth reading.
func isTrace(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".json.gz")
}

// profileContentType is the stored content type: gzip passes through as
// application/gzip (the store never recompresses it), JSON and text as such.
func profileContentType(name string) string {
	n := strings.ToLower(name)
	switch {
	case strings.HasSuffix(n, ".gz"):
		return "application/gzip"
	case strings.HasSuffix(n, ".json"):
		return "application/json"
	case strings.HasSuffix(n, ".txt"):
		return "text/plain; charset=utf-8"
	}
	return "application/octet-stream"
}

// collect streams each file to storage under its own name, reading every
// trace on the way (one pass: the bytes are teed into torchtrace.Analyze,
// never read twice or held whole), and removes it from the source when asked.
// frame bounds the recording as measured here (see frameRun.bound).
func (p *Profile) collect(ctx context.Context, in *vocab.Input, src profileSource, files []agent.File, frame time.Duration) []collected {
	out := make([]collected, 0, len(files))
	for _, f := range files {
		c := p.collectOne(ctx, in, src, f, frame)
		if c.Error != "" {
			stepkit.Logger(in).Warn("A profile file could not be stored.", zap.String("file", f.Name), zap.String("error", c.Error))
		}
		out = append(out, c)
	}
	return out
}

func (p *Profile) collectOne(ctx context.Context, in *vocab.Input, src profileSource, f agent.File, frame time.Duration) (c collected) {
	c.Name = f.Name
	rc, err := src.Open(ctx, f.Name)
	if err != nil {
		c.Error = fmt.Sprintf("open: %v", err)
		return c
	}
	defer rc.Close()
	var r io.Reader = rc
	var analysed chan analysis
	if isTrace(f.Name) {
		pr, pw := io.Pipe()
		sink := &analysisSink{w: pw}
		analysed = make(chan analysis, 1)
		go func() {
			rep, err := torchtrace.Analyze(ctx, pr, torchtrace.Options{Frame: frame})
			// The analysis may stop before the end (not a trace): the rest
			// of the file still goes to storage, the sink drops it.
			pr.CloseWithError(errAnalysisDone)
			analysed <- analysis{rep, err}
		}()
		r = io.TeeReader(rc, sink)
		defer func() {
			pw.Close()
			a := <-analysed
			switch {
			case a.err != nil:
				c.Analysis = a.err.Error()
			case a.rep != nil:
				c.Report = a.rep
			}
		}()
	}
	name := path.Clean(f.Name)
	art, err := stepkit.PutArtifact(ctx, in, name, profileContentType(name), r)
	if err != nil {
		c.Error = err.Error()
		return c
	}
	c.Artifact, c.Bytes = &art, art.Size
	if p.cfg.Collect.RemoveAfterUpload {
		if err := src.Remove(ctx, f.Name); err != nil {
			stepkit.Logger(in).Warn("A stored profile file could not be removed from the server.", zap.String("file", f.Name), zap.Error(err))
		} else {
			c.Removed = true
		}
	}
	return c
}

type analysis struct {
	rep *torchtrace.Report
	err error
}

// errAnalysisDone closes the pipe once Analyze has returned.
var errAnalysisDone = errors.New("analysis done")

// analysisSink feeds the analysis; once the analysis has stopped reading,
// writes succeed silently, so the upload never fails for it.
type analysisSink struct {
	w    *io.PipeWriter
	gone bool
}

func (s *analysisSink) Write(b []byte) (int, error) {
	if !s.gone {
		if _, err := s.w.Write(b); err != nil {
			s.gone = true
		}
	}
	return len(b), nil
}

// savedListing is what the step stores with Recording: the pre-start
// listing, and the engine and prefix the recording was started with, so a
// resumed attempt and the runner's sweeper (StopRecording) speak its dialect.
type savedListing struct {
	Files  listing `json:"files"`
	Engine string  `json:"engine,omitempty"`
	Prefix string  `json:"prefix,omitempty"`
}

// engine is the saved engine; none saved (an older row): vLLM.
func (s savedListing) engine() string {
	if s.Engine == "" {
		return vocab.EngineVLLM
	}
	return s.Engine
}

func (s savedListing) marshal() json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// keepLease renews fr's lease every renewEvery while its files are collected
// and returns what ends the renewals. The lease of a stopped capture must
// outlast the collection: a resumed attempt's is held for one hold from its
// takeover, and a stopped lease that lapses is the sweeper's to release,
// freeing the target for another capture while this one still reads its
// folder. A lost lease ends the renewals (the release then says so).
func (p *Profile) keepLease(ctx context.Context, in *vocab.Input, fr *frameRun) (stop func()) {
	l := fr.lease
	if l == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.tune.renewEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := p.leaseWrite(ctx, func(c context.Context) error { return l.Renew(c, p.tune.hold) })
			switch {
			case errors.Is(err, vocab.ErrLeaseLost):
				stepkit.Logger(in).Warn("The profile lease was lost while its files were collected.", zap.Error(err))
				return
			case err != nil && ctx.Err() == nil:
				stepkit.Logger(in).Warn("The profile lease could not be renewed while its files were collected; trying again.", zap.Error(err))
			}
		}
	}()
	return func() { cancel(); <-done }
}
