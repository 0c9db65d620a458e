package runner

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// viaProxy is dsn with its host:port replaced by the proxy's.
func viaProxy(t *testing.T, dsn string, p *testenv.TCPProxy) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr
	return u.String()
}

func pgTarget(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestOpenWaitsForPostgres: a replica started while PostgreSQL refuses
// connections comes up once it answers (within database.startup_wait), gives
// up with a clear error past it, and does not wait on a server that answers
// with an error (no such database).
func TestOpenWaitsForPostgres(t *testing.T) {
	t.Parallel()
	dsn := testenv.StartPostgres(t)
	open := func(url string, wait time.Duration) (*Service, error) {
		return Open(context.Background(), Options{Config: fastRuns(), DatabaseURL: url, DatabaseWait: wait,
			Planner: planner(), Log: zaptest.NewLogger(t), Registerer: prometheus.NewRegistry()})
	}

	p := testenv.StartTCPProxy(t, pgTarget(t, dsn))
	p.Refuse(t, 1500*time.Millisecond)
	began := time.Now()
	s, err := open(viaProxy(t, dsn, p), 30*time.Second)
	if err != nil {
		t.Fatalf("open while PostgreSQL refuses for 1.5 s, waiting up to 30 s: %v", err)
	}
	s.Close()
	if waited := time.Since(began); waited < time.Second {
		t.Errorf("opened after %v, while the port refused for 1.5 s", waited)
	}

	p.Refuse(t, time.Minute)
	began = time.Now()
	if _, err := open(viaProxy(t, dsn, p), time.Second); err == nil || !strings.Contains(err.Error(), "startup_wait") {
		t.Errorf("open past startup_wait: %v, want a startup_wait error", err)
	} else if time.Since(began) > 10*time.Second {
		t.Errorf("gave up after %v, startup_wait 1 s", time.Since(began))
	}

	u, _ := url.Parse(dsn)
	u.Path = "/no_such_database"
	began = time.Now()
	if _, err := open(u.String(), time.Minute); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("open of a missing database: %v, want its error", err)
	} else if d := time.Since(began); d > 10*time.Second {
		t.Errorf("a server's own error waited %v; it is not transient", d)
	}
}
