package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is the PostgreSQL cluster shared by all tests of one test process.
type Postgres struct {
	// Host is 127.0.0.1.
	Host string
	// Port is the TCP port it listens on.
	Port int
	// User is the superuser, "postgres"; loopback connections need no password.
	User string
	// Dir holds the data directory, the Unix socket and the server log.
	Dir string
	// Proc is the postmaster.
	Proc *Process
}

// DSN returns the URL of database dbname in this cluster.
func (pg *Postgres) DSN(dbname string) string {
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", pg.User, pg.Host, pg.Port, dbname)
}

var (
	pgOnce   sync.Once
	pgShared *Postgres
	pgErr    error
	pgSeq    atomic.Int64
)

// StartPostgres returns the DSN of a new, empty database in the process's
// shared PostgreSQL cluster, starting the cluster on first use. The cluster is
// stopped and deleted by Main, so the calling package's TestMain must call
// testenv.Main; without it the test fails.
func StartPostgres(t testing.TB) string {
	t.Helper()
	pg := SharedPostgres(t)
	name := fmt.Sprintf("t%d_%s", pgSeq.Add(1), sanitize(t.Name()))
	if len(name) > 63 { // NAMEDATALEN-1
		name = name[:63]
	}
	return createDatabase(t, pg, name)
}

// createDatabase creates database name in pg and returns its DSN.
func createDatabase(t testing.TB, pg *Postgres, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		t.Fatalf("testenv: postgres: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: postgres: create database %s: %v", name, err)
	}
	return pg.DSN(name)
}

// SharedPostgres returns the process's PostgreSQL cluster, starting it on
// first use (see StartPostgres, which most tests want instead).
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	SkipShort(t, "needs PostgreSQL, a real component")
	if !mainActive.Load() {
		t.Fatalf("testenv: postgres is shared by the whole test process and only testenv.Main can stop it: " +
			"add `func TestMain(m *testing.M) { testenv.Main(m) }` to this package")
	}
	pgOnce.Do(func() { pgShared, pgErr = startPostgresCluster() })
	if pgErr != nil {
		t.Fatalf("testenv: postgres: %v", pgErr)
	}
	return pgShared
}

// startPostgresCluster initdb's a cluster in a temporary directory and starts
// it on a free loopback port, as the postgres OS user when we are root.
func startPostgresCluster() (*Postgres, error) {
	initdb, err := lookTool("initdb")
	if err != nil {
		return nil, fmt.Errorf("initdb not installed: run scripts/install-tools.sh (%w)", err)
	}
	postgres, err := lookTool("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres not installed: run scripts/install-tools.sh (%w)", err)
	}
	base, err := processSubdir("pg-")
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential(base)
	if err != nil {
		return nil, err
	}
	if err := initCluster(initdb, base, cred); err != nil {
		return nil, err
	}
	var lastLogs string
	for range 3 {
		pg, err := startPostmaster(postgres, base, cred, 0)
		if err == nil {
			onShutdown(func() { pg.Proc.stop(syscall.SIGINT, 10*time.Second) }) // SIGINT: fast shutdown
			return pg, nil
		}
		if pg == nil {
			return nil, err
		}
		lastLogs = pg.Proc.Logs()
		pg.Proc.stop(syscall.SIGINT, 10*time.Second)
		if !strings.Contains(strings.ToLower(lastLogs), "address already in use") {
			return nil, fmt.Errorf("%w\nserver log:\n%s", err, tail(lastLogs, 4096))
		}
	}
	return nil, fmt.Errorf("no free port after 3 tries\nserver log:\n%s", tail(lastLogs, 4096))
}

// initCluster initdb's a cluster in base/data as cred (nil: as we are).
func initCluster(initdb, base string, cred *syscall.Credential) error {
	cmd := exec.Command(initdb, "-D", filepath.Join(base, "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = base // the postgres user may not be able to enter the test's directory
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// postgresCredential returns the postgres OS user's credential and hands it
// dir when we run as root (the server refuses to run as root); otherwise nil.
func postgresCredential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres OS user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// startPostmaster starts the server on port (0: a fresh one) and waits until
// it takes connections. When the server started but failed, the returned
// Postgres carries the process (for its log) along with the error.
func startPostmaster(bin, base string, cred *syscall.Credential, port int) (*Postgres, error) {
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	pg := &Postgres{Host: "127.0.0.1", Port: port, User: "postgres", Dir: base}
	cmd := exec.Command(bin, "-D", filepath.Join(base, "data"),
		"-p", strconv.Itoa(pg.Port), "-k", base,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=200",
		// Test data need not survive a machine crash.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	cmd.Dir = base
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	p, err := startProcess("postgres", cmd, filepath.Join(base, "postgres.log"))
	if err != nil {
		return nil, err
	}
	pg.Proc = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return pg, nil
		}
		cancel()
		if p.Exited() {
			return pg, fmt.Errorf("server exited: %w", p.Err())
		}
		if time.Now().After(deadline) {
			return pg, fmt.Errorf("not accepting connections after 30s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DB names one database several processes (replicas) of a test may share:
// a PostgreSQL URL, or a SQLite file's path.
type DB struct{ URL, Path string }

// ForEachDB runs f once on SQLite and once on PostgreSQL, a fresh database
// each: the run service's tests and its parts' hold both dialects to the
// same assertions. Under -short the PostgreSQL half skips.
func ForEachDB(t *testing.T, f func(t *testing.T, db DB)) {
	t.Run("sqlite", func(t *testing.T) {
		f(t, DB{Path: filepath.Join(t.TempDir(), "autocapture.db")})
	})
	t.Run("postgres", func(t *testing.T) {
		f(t, DB{URL: StartPostgres(t)})
	})
}
