package outbox

import "testing"

// TestCoalescedEdits: of the group's parent edits at the head of a thread's
// pending operations, those a later edit covers are left to it; an edit
// behind a member's reply keeps its place.
func TestCoalescedEdits(t *testing.T) {
	g, r, v := opGroupUpdate, opMemberReply, opReply
	cases := []struct {
		ops  []opKind
		want int // how many at the head are coalesced
	}{
		{nil, 0},
		{[]opKind{g}, 0},
		{[]opKind{r, g, g}, 0},
		{[]opKind{v, g, g}, 0},
		{[]opKind{g, g, g}, 2},
		{[]opKind{g, r}, 0},
		{[]opKind{g, g, r}, 1},
		{[]opKind{g, r, g}, 1},
		{[]opKind{g, g, r, r, g, r}, 2},
	}
	of := map[opKind]Op{g: GroupEdit{Member: "m", Change: MemberVerdict}, r: MemberReply{Member: "m"},
		v: StepReply{Plan: "pb", Step: "a"}}
	for _, c := range cases {
		ops := make([]pendingOp, len(c.ops))
		for i, k := range c.ops {
			ops[i] = pendingOp{seq: i + 1, op: of[k]}
		}
		got := coalesced(ops)
		if len(got) != c.want {
			t.Errorf("%v: %d coalesced, want %d", c.ops, len(got), c.want)
			continue
		}
		for i, o := range got {
			if o.seq != i+1 {
				t.Errorf("%v: coalesced seq %d at %d, want the head's", c.ops, o.seq, i)
			}
		}
	}
}
