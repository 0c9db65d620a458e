package vllmsim

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"
)

var shiftStart = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

// TestShiftAfterStartsHealthy: with ShiftAfter the sim runs healthy traffic,
// reports the pending shift, shifts at exactly that instant (one log line),
// then reports when it shifted and from what; the queue follows the cause.
func TestShiftAfterStartsHealthy(t *testing.T) {
	core, logs := zapobserver.New(zap.InfoLevel)
	s, err := New(Options{Scenario: ScenarioOverload, ShiftAfter: 30 * time.Second, Seed: 2, Start: shiftStart, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	st := s.State()
	if st.Scenario != ScenarioHealthy || st.Pending == nil || st.Pending.Scenario != ScenarioOverload ||
		!st.Pending.At.Equal(shiftStart.Add(30*time.Second)) || st.Load.RPS != scenarios[ScenarioHealthy].Load.RPS {
		t.Fatalf("before the shift: %+v (pending %+v)", st, st.Pending)
	}
	s.Advance(30*time.Second - time.Millisecond)
	if st := s.State(); st.Scenario != ScenarioHealthy || st.Waiting > 3 || st.Pending == nil {
		t.Fatalf("1 ms before the shift: scenario %s, waiting %d, pending %+v", st.Scenario, st.Waiting, st.Pending)
	}
	s.Advance(2 * time.Millisecond)
	st = s.State()
	if st.Scenario != ScenarioOverload || !st.Since.Equal(shiftStart.Add(30*time.Second)) ||
		st.Previous != ScenarioHealthy || st.Pending != nil || st.Load.RPS != 14 {
		t.Fatalf("after the shift: %+v", st)
	}
	shifted := logs.FilterMessage("Scenario shifted.").All()
	if len(shifted) != 1 || shifted[0].ContextMap()["scenario"] != ScenarioOverload || shifted[0].ContextMap()["from"] != ScenarioHealthy {
		t.Fatalf("shift log lines: %+v", shifted)
	}
	s.Advance(15 * time.Second)
	if w := s.State().Waiting; w <= alertQueue {
		t.Fatalf("15 s into overload the queue is %d", w)
	}
}

// TestShapeScriptsLongerPrompts: healthy traffic whose prompts turn 5×
// longer through a shape: the scenario stays healthy, the shape shows in the
// state, and the requests sent after it carry ~5× the prompt tokens.
func TestShapeScriptsLongerPrompts(t *testing.T) {
	s, err := New(Options{Seed: 4, Start: shiftStart})
	if err != nil {
		t.Fatal(err)
	}
	s.Advance(60 * time.Second)
	mean := meanPrompt(t, s.Requests())
	mine := 1750.0
	sh := Shape{PromptTokens: &DistShape{Mean: &mine, Min: new(320.0), Max: new(7500.0)}}
	if err := s.SetShape(sh); err != nil {
		t.Fatal(err)
	}
	mine = 1 // the sim keeps its own copy
	st := s.State()
	if st.Scenario != ScenarioHealthy || st.Shape == nil || *st.Shape.PromptTokens.Mean != 1750 ||
		st.Load.PromptTokens != (Dist{Mean: 1750, Min: 320, Max: 7500, Sigma: 0.6}) || st.Load.RPS != scenarios[ScenarioHealthy].Load.RPS {
		t.Fatalf("state after the shape: %+v", st)
	}
	cut := s.Now()
	s.Advance(60 * time.Second)
	var after []FinishedRequest
	for _, r := range s.Requests() {
		if r.Arrival.After(cut) {
			after = append(after, r)
		}
	}
	longer := meanPrompt(t, after)
	g := measure(t, s, 30*time.Second)
	t.Logf("prompt mean %.0f → %.0f (%.1f×); then %v", mean, longer, longer/mean, g)
	if r := longer / mean; r < 3.5 || r > 6.5 {
		t.Errorf("prompts %.0f → %.0f: %.1f×, want ~5×", mean, longer, r)
	}
	if err := s.SetScenario(ScenarioHealthy); err != nil || s.State().Shape != nil {
		t.Errorf("switching scenario keeps the shape (err %v)", err)
	}
}

// meanPrompt is the mean prompt length of reqs.
func meanPrompt(t *testing.T, reqs []FinishedRequest) float64 {
	t.Helper()
	if len(reqs) < 20 {
		t.Fatalf("only %d requests", len(reqs))
	}
	sum := 0
	for _, r := range reqs {
		sum += r.PromptTokens
	}
	return float64(sum) / float64(len(reqs))
}

// TestShiftReplacesAndCancels: one shift pending at most; the latest
// instruction wins, an immediate change cancels a pending shift.
func TestShiftReplacesAndCancels(t *testing.T) {
	s, err := New(Options{Seed: 1, Start: shiftStart, Load: NoLoad})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shift(ScenarioOverload, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.ShiftTo(Change{Shape: &Shape{RPS: new(5.0)}, After: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	p := s.State().Pending
	if p == nil || p.Scenario != ScenarioHealthy || *p.Shape.RPS != 5 || !p.At.Equal(shiftStart.Add(10*time.Second)) {
		t.Fatalf("pending %+v", p)
	}
	s.Advance(10 * time.Second)
	if st := s.State(); st.Pending != nil || st.Load.RPS != 5 || st.Scenario != ScenarioHealthy {
		t.Fatalf("after the shape shift: %+v", st)
	}
	_ = s.Shift(ScenarioKVPressure, time.Minute)
	if err := s.SetScenario(ScenarioDecodeBound); err != nil || s.State().Pending != nil {
		t.Fatalf("an immediate switch left the shift pending (%v)", err)
	}
	_ = s.Shift(ScenarioKVPressure, time.Minute)
	if !s.CancelShift() || s.CancelShift() || s.State().Pending != nil {
		t.Fatal("CancelShift")
	}
	s.Advance(2 * time.Minute)
	if sc := s.State().Scenario; sc != ScenarioDecodeBound {
		t.Fatalf("a cancelled shift landed: %s", sc)
	}
}

// TestShiftValidation: every bad change is refused up front with its
// reason, and leaves the state as it was.
func TestShiftValidation(t *testing.T) {
	s, err := New(Options{Seed: 1, Load: NoLoad})
	if err != nil {
		t.Fatal(err)
	}
	for want, c := range map[string]Change{
		"want >= 0":               {Scenario: ScenarioOverload, After: -time.Second},
		"nothing to change":       {After: time.Second},
		`unknown scenario "nope"`: {Scenario: "nope"},
		"shape: empty":            {Shape: &Shape{}},
		"prompt_tokens: empty":    {Shape: &Shape{PromptTokens: &DistShape{}}},
		"mean 1750 outside [min 64, max 1500]: move the bound too": {Shape: &Shape{PromptTokens: &DistShape{Mean: new(1750.0)}}},
		"over max-model-len 8192":                                  {Shape: &Shape{PromptTokens: &DistShape{Mean: new(5000.0), Max: new(8000.0)}}},
		"rps 5000: want 0..1000":                                   {Shape: &Shape{RPS: new(5000.0)}},
		"concurrency -1":                                           {Shape: &Shape{Concurrency: new(-1)}},
		"think_time -1s":                                           {Shape: &Shape{ThinkTime: new(Duration(-time.Second))}},
		"output_tokens: sigma 9":                                   {Shape: &Shape{OutputTokens: &DistShape{Sigma: new(9.0)}}},
		"max_tokens 0":                                             {Shape: &Shape{MaxTokens: new(0)}},
		"timeout_s: max 1 below min 120":                           {Shape: &Shape{Timeout: &DistShape{Max: new(1.0)}}},
	} {
		err := s.ShiftTo(c)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: error %v, want %q", c, err, want)
		}
	}
	if st := s.State(); st.Shape != nil || st.Pending != nil || st.Scenario != ScenarioHealthy {
		t.Errorf("a refused change left a trace: %+v", st)
	}
	for _, name := range Scenarios() {
		if err := scenarios[name].Load.validate(DefaultEngine.MaxModelLen); err != nil {
			t.Errorf("built-in scenario %s: %v", name, err)
		}
	}
	if _, err := New(Options{ShiftAfter: time.Second}); err == nil {
		t.Error("shifting healthy to healthy accepted")
	}
}

// TestAdminShift: POST /admin/scenario schedules shifts and shapes, and
// refuses, with a 400 and the reason, any body it does not fully
// understand.
func TestAdminShift(t *testing.T) {
	s, err := New(Options{Seed: 1, Load: NoLoad, Start: shiftStart})
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) (int, string) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/admin/scenario", strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	code, body := post(`{"scenario":"overload","after":"30s","shape":{"rps":20,"prompt_tokens":{"mean":500}}}`)
	var rep scenarioReport
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	if rep.Scenario != ScenarioHealthy || rep.Pending == nil || rep.Pending.Scenario != ScenarioOverload ||
		*rep.Pending.Shape.RPS != 20 || !rep.Pending.At.Equal(shiftStart.Add(30*time.Second)) {
		t.Fatalf("report %s", body)
	}
	s.Advance(31 * time.Second)
	if st := s.State(); st.Scenario != ScenarioOverload || st.Load.RPS != 20 || st.Load.PromptTokens.Mean != 500 || st.Load.PromptTokens.Max != 1500 {
		t.Fatalf("after the shift: %+v", st)
	}
	for body, want := range map[string]string{
		``:                                      "nothing to change",
		`{"scenario":"overload","afterr":"1s"}`: `unknown field "afterr"`,
		`{"shape":{"rate":3}}`:                  `unknown field "rate"`,
		`{"shape":{"prompt_tokens":{"stddev":3}}}`:       `unknown field "stddev"`,
		`{"scenario":"overload","after":30}`:             `want text like "30s"`,
		`{"scenario":"overload","after":"-1s"}`:          "want >= 0",
		`{"after":"1s"}`:                                 "nothing to shift",
		`{"load":3,"after":"1s","scenario":"healthy"}`:   "with after, set shape.rps",
		`{"scenario":"healthy"} {"scenario":"overload"}`: "more than one JSON value",
		`{"shape":{"output_tokens":{"mean":400}}}`:       "output_tokens: mean 400 outside",
		`{"concurrency":-2}`:                             "concurrency: want a count",
	} {
		code, raw := post(body)
		var e struct{ Error string }
		_ = json.Unmarshal([]byte(raw), &e)
		if got := e.Error; code != 400 || !strings.Contains(got, want) {
			t.Errorf("POST %s: %d %s, want 400 with %q", body, code, got, want)
		}
	}
	if st := s.State(); st.Scenario != ScenarioOverload || st.Load.RPS != 20 {
		t.Errorf("refused bodies changed the state: %+v", st)
	}
}
