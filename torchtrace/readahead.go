package torchtrace

import (
	"context"
	"io"
)

// readahead decompresses in its own goroutine, a few blocks ahead of the
// parser: gzip and JSON scanning then run on two cores instead of one, with
// at most readaheadBlocks+2 blocks of memory.
type readahead struct {
	full  chan []byte // blocks read, in order
	free  chan []byte // blocks to refill
	done  chan struct{}
	blk   []byte // the block being consumed
	cur   []byte // its unread part
	err   error  // the source's error, after the last block
	errCh chan error
}

const (
	readaheadBlocks = 4
	readaheadSize   = 1 << 20
)

// newReadahead starts reading src; the goroutine closes src (when it is an
// io.Closer) once it stops, so that no Close races a Read.
func newReadahead(ctx context.Context, src io.Reader) *readahead {
	ra := &readahead{
		full: make(chan []byte, readaheadBlocks), free: make(chan []byte, readaheadBlocks+1),
		done: make(chan struct{}), errCh: make(chan error, 1),
	}
	for range readaheadBlocks + 1 {
		ra.free <- make([]byte, readaheadSize)
	}
	go ra.run(ctx, src)
	return ra
}

func (ra *readahead) run(ctx context.Context, src io.Reader) {
	defer close(ra.full)
	if c, ok := src.(io.Closer); ok {
		defer c.Close()
	}
	for {
		var b []byte
		select {
		case b = <-ra.free:
		case <-ra.done:
			return
		case <-ctx.Done():
			ra.errCh <- ctx.Err()
			return
		}
		n, err := fill(src, b[:cap(b)])
		if n > 0 {
			select {
			case ra.full <- b[:n]:
			case <-ra.done:
				return
			}
		}
		if err != nil {
			ra.errCh <- err
			return
		}
	}
}

// Read hands out the blocks in order, then the source's error.
func (ra *readahead) Read(p []byte) (int, error) {
	for len(ra.cur) == 0 {
		if ra.err != nil {
			return 0, ra.err
		}
		b, ok := <-ra.full
		if !ok {
			ra.err = <-ra.errCh
			continue
		}
		ra.blk, ra.cur = b, b
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	if len(ra.cur) == 0 {
		ra.free <- ra.blk // spent: refill it
	}
	return n, nil
}

// Close stops the goroutine.
func (ra *readahead) Close() { close(ra.done) }

// fill reads into b until it is full or src fails; unlike io.ReadFull it
// keeps src's own error (a truncated gzip stream's io.ErrUnexpectedEOF
// must not read as a short last block).
func fill(src io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := src.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
