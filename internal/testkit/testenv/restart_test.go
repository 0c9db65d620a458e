package testenv

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestOwnPostgresRestart: a test's own cluster, stopped, refuses
// connections; restarted, it is on the same port with the data written
// before the stop.
func TestOwnPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := StartOwnPostgres(t)
	dsn := pg.CreateDatabase(t, "restart")
	port := pg.Port
	ctx := context.Background()
	exec := func(sql string) error {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(c, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(c)
		_, err = conn.Exec(c, sql)
		return err
	}
	if err := exec("create table kept (x int); insert into kept values (7)"); err != nil {
		t.Fatal(err)
	}
	pg.Stop()
	if err := exec("select 1"); err == nil {
		t.Fatal("a stopped cluster took a connection")
	}
	pg.Restart(t)
	if pg.Port != port {
		t.Fatalf("restarted on port %d, want %d", pg.Port, port)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	defer conn.Close(ctx)
	var x int
	if err := conn.QueryRow(ctx, "select x from kept").Scan(&x); err != nil || x != 7 {
		t.Fatalf("after the restart: kept = %d, %v; want 7", x, err)
	}
}

// TestPrometheusAndJaegerRestart: killed, they stop answering; restarted,
// they answer on the same URLs.
func TestPrometheusAndJaegerRestart(t *testing.T) {
	t.Parallel()
	prom := StartPrometheus(t, PrometheusOptions{})
	j := StartJaeger(t)
	promURL, health := prom.URL, j.HealthURL
	prom.Proc.Kill9()
	j.Proc.Kill9()
	client := &http.Client{Timeout: 2 * time.Second}
	for _, u := range []string{promURL + "/-/ready", health} {
		if resp, err := client.Get(u); err == nil {
			resp.Body.Close()
			t.Fatalf("%s answered %s after the kill", u, resp.Status)
		}
	}
	prom.Restart(t)
	j.Restart(t)
	if prom.URL != promURL || j.HealthURL != health {
		t.Fatalf("restarted at %s and %s, want %s and %s", prom.URL, j.HealthURL, promURL, health)
	}
	WaitHTTP(t, promURL+"/-/ready", 10*time.Second)
	WaitHTTP(t, health, 10*time.Second)
}
