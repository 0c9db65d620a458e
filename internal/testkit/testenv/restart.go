package testenv

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Stopping a component and starting it again on the same port, with the same
// files, as after an outage: for the chaos tests. Stop a component with its
// Proc (Stop for SIGTERM, Kill9 for a crash), then call its Restart.

// Restart starts p's command again (same binary, arguments, environment,
// working directory and credential) under StartProcess, after stopping p if
// it still runs. It does not wait for the new process to be ready.
func (p *Process) Restart(t testing.TB) *Process {
	t.Helper()
	p.Stop()
	old := p.Cmd
	cmd := exec.Command(old.Path, old.Args[1:]...)
	cmd.Env, cmd.Dir = old.Env, old.Dir
	if old.SysProcAttr != nil && old.SysProcAttr.Credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: old.SysProcAttr.Credential}
	}
	return StartProcess(t, p.Name, cmd)
}

// Restart stops Prometheus if it still runs and starts it again on the same
// port, configuration and TSDB, and waits for /-/ready.
func (p *Prometheus) Restart(t testing.TB) {
	t.Helper()
	p.Proc = p.Proc.Restart(t)
	p.Proc.WaitHTTP(t, p.URL+"/-/ready", 30*time.Second)
}

// Restart stops Jaeger if it still runs and starts it again on the same
// ports and configuration (its memory storage starts empty), and waits for
// its health check.
func (j *Jaeger) Restart(t testing.TB) {
	t.Helper()
	j.Proc = j.Proc.Restart(t)
	j.Proc.WaitHTTP(t, j.HealthURL, 60*time.Second)
}

// OwnPostgres is a PostgreSQL cluster of one test alone, not the process's
// shared one (SharedPostgres), so that the test may stop and restart it:
// Stop, then Restart on the same port and data directory.
type OwnPostgres struct {
	*Postgres
	base, bin string
	cred      *syscall.Credential
}

// StartOwnPostgres initdb's a cluster of the test's own and starts it on a
// free loopback port; it is stopped when the test ends. Like StartPostgres,
// it needs testenv.Main (its files live in the process directory).
func StartOwnPostgres(t testing.TB) *OwnPostgres {
	t.Helper()
	SkipShort(t, "needs PostgreSQL, a real component")
	if !mainActive.Load() {
		t.Fatalf("testenv: StartOwnPostgres needs `func TestMain(m *testing.M) { testenv.Main(m) }` in this package")
	}
	initdb, bin := Tool(t, "initdb"), Tool(t, "postgres")
	base, err := processSubdir("pg-own-")
	if err != nil {
		t.Fatalf("testenv: postgres: %v", err)
	}
	cred, err := postgresCredential(base)
	if err != nil {
		t.Fatalf("testenv: postgres: %v", err)
	}
	if err := initCluster(initdb, base, cred); err != nil {
		t.Fatalf("testenv: postgres: %v", err)
	}
	own := &OwnPostgres{base: base, bin: bin, cred: cred}
	own.start(t, 0)
	t.Cleanup(own.Stop)
	return own
}

// Stop shuts the server down (SIGINT, PostgreSQL's fast shutdown: sessions
// are ended, nothing waits for clients). A stopped server stays stopped.
func (pg *OwnPostgres) Stop() { pg.Proc.stop(syscall.SIGINT, 10*time.Second) }

// Restart stops the server if it still runs and starts it again on the same
// port and data directory, and waits until it takes connections.
func (pg *OwnPostgres) Restart(t testing.TB) {
	t.Helper()
	pg.Stop()
	pg.start(t, pg.Port)
}

func (pg *OwnPostgres) start(t testing.TB, port int) {
	t.Helper()
	p, err := startPostmaster(pg.bin, pg.base, pg.cred, port)
	if err != nil {
		logs := ""
		if p != nil {
			logs = tail(p.Proc.Logs(), 4096)
			p.Proc.stop(syscall.SIGINT, 10*time.Second)
		}
		t.Fatalf("testenv: postgres on port %d: %v\n%s", port, err, logs)
	}
	pg.Postgres = p
}

// CreateDatabase creates database name and returns its DSN.
func (pg *OwnPostgres) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	return createDatabase(t, pg.Postgres, name)
}
