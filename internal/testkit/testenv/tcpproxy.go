package testenv

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TCPProxy is a loopback TCP proxy in front of one server (PostgreSQL, say)
// that a test can break the way a failover does: every open connection cut
// at once, mid-transaction, and for a while none accepted. Clients connect to
// Addr instead of the server.
type TCPProxy struct {
	// Addr is the proxy's 127.0.0.1:port.
	Addr   string
	target string

	mu       sync.Mutex
	ln       net.Listener // nil while refusing
	conns    map[*proxied]struct{}
	closed   bool
	accepted atomic.Int64
	cut      atomic.Int64
	slow     atomic.Int64 // SlowConnects' delay, in nanoseconds
	wg       sync.WaitGroup
}

// proxied is one client connection and its upstream twin.
type proxied struct{ client, server net.Conn }

// StartTCPProxy listens on a free 127.0.0.1 port and forwards every
// connection to target (host:port) until the test ends.
func StartTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: tcp proxy: %v", err)
	}
	p := &TCPProxy{Addr: ln.Addr().String(), target: target, conns: map[*proxied]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.close)
	return p
}

// Accepted is how many connections the proxy has taken since it started:
// after a Cut, the ones beyond the count before it are the clients'
// reconnections.
func (p *TCPProxy) Accepted() int64 { return p.accepted.Load() }

// Open is how many connections are open through the proxy now.
func (p *TCPProxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Cut resets every open connection at once (both sides, RST: no orderly
// goodbye, as when the server's host dies) and returns how many it cut. New
// connections are still accepted.
func (p *TCPProxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		reset(c.client)
		reset(c.server)
		delete(p.conns, c)
	}
	p.cut.Add(int64(n))
	return n
}

// Refuse cuts every open connection and closes the listening port for d, so
// that connecting is refused (ECONNREFUSED), then listens on the same port
// again. It returns how many connections it cut; it does not wait for d.
func (p *TCPProxy) Refuse(t testing.TB, d time.Duration) int {
	t.Helper()
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	p.mu.Unlock()
	n := p.Cut()
	time.AfterFunc(d, func() {
		ln, err := net.Listen("tcp", p.Addr)
		if err != nil {
			t.Errorf("testenv: tcp proxy: listen again on %s: %v", p.Addr, err)
			return
		}
		p.serve(ln)
	})
	return n
}

// SlowConnects makes every connection accepted from now on wait d before
// the proxy dials the server (0: none), as a database slow to accept does
// under load (a backend to fork, authentication); the client sees its
// connect take d. Open connections are not slowed.
func (p *TCPProxy) SlowConnects(d time.Duration) { p.slow.Store(int64(d)) }

// serve accepts on ln until it is closed.
func (p *TCPProxy) serve(ln net.Listener) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return
	}
	p.ln = ln
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			go p.forward(c)
		}
	}()
}

// forward dials the target for client and copies both ways until either
// side ends or the connection is cut.
func (p *TCPProxy) forward(client net.Conn) {
	if d := time.Duration(p.slow.Load()); d > 0 {
		time.Sleep(d)
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	c := &proxied{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	end := func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		client.Close()
		server.Close()
	}
	go func() { defer p.wg.Done(); copyHalf(server, client); end() }()
	go func() { defer p.wg.Done(); copyHalf(client, server); end() }()
}

// copyHalf copies one direction; a reset or a cut ends it, and the caller
// then ends the other direction too.
func copyHalf(dst, src net.Conn) { _, _ = io.Copy(dst, src) }

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// close stops listening, cuts what is open and waits for the copiers.
func (p *TCPProxy) close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		p.ln.Close()
	}
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}

// String names the proxy and its target, for logs.
func (p *TCPProxy) String() string {
	return fmt.Sprintf("tcp proxy %s → %s (%d accepted, %d cut)", p.Addr, p.target, p.accepted.Load(), p.cut.Load())
}
