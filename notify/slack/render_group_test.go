package slack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

func stormGroup(n int) notify.Group {
	g := notify.Group{Kind: notify.GroupStorm, LeadID: "r000", Alert: "VLLMHighTTFT"}
	verdicts := []string{"overload", "overload", "kv-pressure", "", "decode-bound"}
	for i := range n {
		m := notify.Member{RunID: fmt.Sprintf("r%03d", i), Alert: "VLLMHighTTFT", Instance: fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250),
			Model: "Qwen/Qwen2.5-1.5B", Status: "succeeded", Verdict: verdicts[i%len(verdicts)]}
		if m.Verdict == "" {
			m.Status = "running"
		}
		m.Resolved = i%7 == 0
		g.Members = append(g.Members, m)
	}
	return g
}

func fleetGroup() notify.Group {
	g := notify.Group{Kind: notify.GroupFleet, LeadID: "r1", Alert: "VLLMHighTTFT", Model: "llama-70b"}
	for i, v := range []string{"overload", "overload", "kv-pressure", "overload", "", "overload"} {
		st := vocab.StatusSucceeded
		if v == "" {
			st = vocab.StatusQueued
		}
		g.Members = append(g.Members, notify.Member{RunID: "r" + strconv.Itoa(i+1), Alert: "VLLMHighTTFT",
			Instance: "10.0.0." + strconv.Itoa(i+1) + ":8000", Model: "llama-70b", Status: st, Verdict: v, Resolved: i == 1})
	}
	return g
}

// TestRenderGroupGolden pins a storm's parent of 200 lines (as many as fit,
// the rest counted), a small storm, a fleet's parent, its resolution, and a
// member's compact reply.
func TestRenderGroupGolden(t *testing.T) {
	resolved := fleetGroup()
	for i := range resolved.Members {
		resolved.Members[i].Resolved, resolved.Members[i].Status = true, "succeeded"
		if resolved.Members[i].Verdict == "" {
			resolved.Members[i].Verdict = "overload"
		}
	}
	member := notify.MemberReport{Member: fleetGroup().Members[2], Duration: 6200 * time.Millisecond, Verdict: kvVe,
		Steps: []notify.StepReport{
			step("snapshot", "prometheus", vocab.TierMetrics, "succeeded", "20 PromQL queries in 0.13s; kv 0.98, queue 42, ttft p99 4.2s"),
			func() notify.StepReport {
				s := step("traces", "traces", vocab.TierTraces, "failed", "")
				s.Reason, s.Error = "unreachable", "jaeger http://127.0.0.1:16686: connection refused"
				return s
			}(),
			step("triage", "triage", vocab.TierTriage, "succeeded", "kv-pressure (also overload): KV cache 98% full (threshold 95%)"),
		}}
	lead := testParent()
	cases := []struct {
		name string
		msg  Message
	}{
		{"group-storm-200", RenderGroupParent(stormGroup(200), lead)},
		{"group-storm-12", RenderGroupParent(stormGroup(12), lead)},
		{"group-fleet", RenderGroupParent(fleetGroup(), lead)},
		{"group-fleet-resolved", RenderGroupParent(resolved, lead)},
		{"group-member-reply", RenderMemberReply(member)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkLimits(t, c.msg)
			got, err := json.MarshalIndent(c.msg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs (rerun with -update if intended):\n%s", golden, got)
			}
		})
	}
}

// TestStormParentAccountsForEveryMember: however many members, the lines
// shown plus the "… and N more" line's count make the whole group, and the
// counts of those left out add up to N.
func TestStormParentAccountsForEveryMember(t *testing.T) {
	more := regexp.MustCompile(`… and (\d+) more: (.*)`)
	count := regexp.MustCompile(`(\d+) [a-z-]+`)
	for _, n := range []int{11, 60, 200, 1000} {
		msg := RenderGroupParent(stormGroup(n), testParent())
		checkLimits(t, msg)
		raw, _ := json.Marshal(msg.Blocks)
		lines := strings.Count(string(raw), "• ")
		left := 0
		if m := more.FindStringSubmatch(string(raw)); m != nil {
			left, _ = strconv.Atoi(m[1])
			sum := 0
			for _, c := range count.FindAllStringSubmatch(strings.SplitN(m[2], `"`, 2)[0], -1) {
				k, _ := strconv.Atoi(c[1])
				sum += k
			}
			if sum != left {
				t.Errorf("%d members: the more line counts %d by outcome, says %d", n, sum, left)
			}
		}
		if lines+left != n {
			t.Errorf("%d members: %d lines shown + %d more", n, lines, left)
		}
		if n <= 60 && left > 0 {
			t.Errorf("%d members: %d left out of a parent that has room", n, left)
		}
	}
}
