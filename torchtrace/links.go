package torchtrace

// linkTable maps an "External id" to the operator that carries it.
//
// Kineto numbers External ids densely and in increasing order, and a file
// may list every CPU operator before the first kernel, so the table must
// hold a whole file's operators: it stores them in chunks of linkChunk
// consecutive ids, two bytes per id (an operator index), allocated when an
// id in their range appears. The bound: at most maxLinkChunks chunks
// (linkChunk × maxLinkChunks ids, 16 MiB); past it the chunk inserted
// first is dropped, and kernels of the operators it held count in every
// total, only not under an operator.
type linkTable struct {
	chunks map[int64]*[linkChunk]uint16
	order  []int64 // chunk keys in insertion order (a FIFO ring)
	head   int
	drops  int // chunks dropped for the bound
}

const (
	linkChunk     = 4096
	maxLinkChunks = 2048
)

func newLinkTable() *linkTable {
	return &linkTable{chunks: map[int64]*[linkChunk]uint16{}}
}

func split(id int64) (key int64, slot int) {
	key = id / linkChunk
	slot = int(id % linkChunk)
	if slot < 0 { // negative ids, which Kineto does not write
		key--
		slot += linkChunk
	}
	return key, slot
}

// set links id to operator op (0 <= op < 65535).
func (t *linkTable) set(id int64, op int32) {
	key, slot := split(id)
	c := t.chunks[key]
	if c == nil {
		if len(t.chunks) >= maxLinkChunks {
			delete(t.chunks, t.order[t.head])
			t.order[t.head] = key
			t.head = (t.head + 1) % len(t.order)
			t.drops++
		} else {
			t.order = append(t.order, key)
		}
		c = new([linkChunk]uint16)
		t.chunks[key] = c
	}
	c[slot] = uint16(op + 1)
}

// get is the operator linked to id.
func (t *linkTable) get(id int64) (int32, bool) {
	key, slot := split(id)
	c := t.chunks[key]
	if c == nil || c[slot] == 0 {
		return 0, false
	}
	return int32(c[slot]) - 1, true
}
