package outbox

import "testing"

// TestResumedReplySaysWhere: a resume's reply says, as an on-call reads it,
// which replica goes on, after what, and which resume it is; "another
// replica" is decided by the replicas' names, not their processes; a ref
// recorded before replicas were named still reads.
func TestResumedReplySaysWhere(t *testing.T) {
	tests := []struct {
		name     string
		ref      string
		want     string
		wantTime int
	}{
		{"another replica", resumedRef(2, "r0/7/1a2b3c4d", "r1/9/5e6f7a8b"),
			"resumed by replica r1 after r0 stopped (kill or crash) — 2nd resume", 2},
		{"the same replica, restarted", resumedRef(1, "r0/7/1a2b3c4d", "r0/8/5e6f7a8b"),
			"resumed by replica r0 after it restarted (kill or crash) — 1st resume", 1},
		{"the same process", resumedRef(3, "r0/7/1a2b3c4d", "r0/7/1a2b3c4d"),
			"resumed by replica r0 after it lost the run's lease (a stall or a store error) — 3rd resume", 3},
		{"lost job", resumedRef(4, "", "r1/9/5e6f7a8b"),
			"resumed by replica r1 after an interruption — 4th resume", 4},
		{"older ref", "resumed:11", "resumed after an interruption — 11th resume", 11},
		{"no replica took it within a lease", resumedRef(21, "r0/7/1a2b3c4d", ""),
			"resumed after r0 stopped (kill or crash); a live replica goes on — 21st resume", 21},
		{"an owner named by its host", resumedRef(22, "vm/7/1a2b3c4d", "r1/9/5e6f7a8b"),
			"resumed by replica r1 after vm stopped (kill or crash) — 22nd resume", 22},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, from, on, ok := splitResumedRef(tt.ref)
			if !ok || n != tt.wantTime {
				t.Fatalf("splitResumedRef(%q) = %d, %v; want %d, true", tt.ref, n, ok, tt.wantTime)
			}
			if got := resumedNotice(n, from, on); got != tt.want {
				t.Errorf("reply %q, want %q", got, tt.want)
			}
		})
	}
	if _, _, _, ok := splitResumedRef(stepRef("pb", "s")); ok {
		t.Error("a step's ref read as a resume's")
	}
}

// TestOrdinal: the resume's number as a reader says it.
func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 10: "10th", 11: "11th", 12: "12th",
		13: "13th", 21: "21st", 22: "22nd", 23: "23rd", 101: "101st", 111: "111th", 112: "112th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
