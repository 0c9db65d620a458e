package testenv

import (
	"bufio"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestTCPProxyCutAndRefuse: bytes pass both ways; Cut resets every open
// connection at once; Refuse makes connecting fail with ECONNREFUSED for its
// duration, then the same address forwards again; SlowConnects holds a new
// connection's first answer back by its delay.
func TestTCPProxyCutAndRefuse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a line echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	p := StartTCPProxy(t, ln.Addr().String())
	echo := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && got != "ping\n" {
			t.Fatalf("echo %q", got)
		}
		return err
	}
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := echo(c); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if n := p.Cut(); n != 3 {
		t.Fatalf("cut %d connections, want 3", n)
	}
	for i, c := range conns {
		if err := echo(c); err == nil {
			t.Errorf("connection %d still echoes after the cut", i)
		}
	}
	p.Refuse(t, 500*time.Millisecond)
	if _, err := net.Dial("tcp", p.Addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v, want connection refused", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", p.Addr)
		if err == nil {
			defer c.Close()
			if err := echo(c); err != nil {
				t.Fatalf("after the refusal: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused after 10 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p.Accepted() != 4 || p.Open() != 1 {
		t.Errorf("%s: open %d; want 4 accepted, 1 open", p, p.Open())
	}

	const slow = 300 * time.Millisecond
	p.SlowConnects(slow)
	began := time.Now()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echo(c); err != nil {
		t.Fatalf("through a slowed connect: %v", err)
	}
	if took := time.Since(began); took < slow {
		t.Errorf("a slowed connect answered after %v, want at least %v", took, slow)
	}
}
