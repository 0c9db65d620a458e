// Package testenv starts the real components that autocapture's integration
// tests talk to (Prometheus, Alertmanager, PostgreSQL, Jaeger, our own
// binaries) on 127.0.0.1, on ports it picks, and stops exactly what it started.
//
// A missing component is a test failure, never a skip: in CI a silently
// skipped integration test is a lie. Install everything with
// scripts/install-tools.sh. Under go test -short, and only then, every test
// that needs a component or runs our binary skips before looking for it: the
// quick loop runs on a machine with only Go, whatever else is installed.
//
// Packages that call StartPostgres must run their tests through Main:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// The PostgreSQL cluster is shared by every test of the process and only Main
// knows when the last one has finished; StartPostgres fails the test when Main
// is not in use. Main is harmless for packages that use nothing shared.
package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// mainActive is set by Main; shared servers refuse to start without it.
var mainActive atomic.Bool

// shutdownHooks are run by Main after the tests, last registered first.
var (
	shutdownMu    sync.Mutex
	shutdownHooks []func()
)

// onShutdown registers f to run when Main finishes the tests.
func onShutdown(f func()) {
	shutdownMu.Lock()
	defer shutdownMu.Unlock()
	shutdownHooks = append(shutdownHooks, f)
}

// Main runs the package's tests and then stops the shared servers (the
// PostgreSQL cluster) and removes the binaries BuildBinary built. Call it from
// TestMain; it does not return.
func Main(m *testing.M) {
	mainActive.Store(true)
	code := m.Run()
	shutdownMu.Lock()
	hooks := shutdownHooks
	shutdownHooks = nil
	shutdownMu.Unlock()
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i]()
	}
	os.Exit(code)
}

// handedOut remembers the ports FreePort returned so that one test process
// never hands the same port out twice, even after the listener closed.
var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on right now
// and that this process has not handed out before. Another process may still
// take it before the caller binds it; the starters in this package retry on
// "address already in use".
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return port
}

func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut[port] {
			handedOut[port] = true
			return port, nil
		}
	}
	return 0, errors.New("free port: no unused port after 50 tries")
}

// short reports whether go test runs with -short; a variable so that the
// tests of this package can hold both modes whatever flag they run under.
var short = testing.Short

// SkipShort skips t under -short, saying why. Tests that need no component
// but take long (a long simulation, a build) call it; Tool, BuildBinary and
// the Start functions call it for every component and built binary.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if short() {
		t.Skipf("-short: %s", why)
	}
}

// Tool returns the absolute path of the executable name, looked up in
// $AUTOCAPTURE_TOOLS/bin, ~/.cache/autocapture-tools/bin, the newest
// /usr/lib/postgresql/*/bin, then PATH. A missing tool fails the test; under
// -short the test skips without looking.
func Tool(t testing.TB, name string) string {
	t.Helper()
	SkipShort(t, "needs "+name+", a real component")
	path, err := lookTool(name)
	if err != nil {
		t.Fatalf("%s not installed: run scripts/install-tools.sh (%v)", name, err)
	}
	return path
}

// lookTool is Tool without a test: it reports where it looked.
func lookTool(name string) (string, error) {
	var dirs []string
	if d := os.Getenv("AUTOCAPTURE_TOOLS"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".cache", "autocapture-tools", "bin"))
	}
	if d := newestPostgresBin(); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if isExecutable(p) {
			return filepath.Abs(p)
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("not in %s nor in PATH", strings.Join(dirs, ", "))
	}
	return filepath.Abs(p)
}

// newestPostgresBin returns /usr/lib/postgresql/<highest version>/bin, or "".
func newestPostgresBin() string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool {
		return versionLess(filepath.Base(filepath.Dir(matches[i])), filepath.Base(filepath.Dir(matches[j])))
	})
	if len(matches) == 0 {
		return ""
	}
	return matches[len(matches)-1]
}

// versionLess compares dotted numeric versions ("9.6" < "15").
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, errx := strconv.Atoi(as[i])
		y, erry := strconv.Atoi(bs[i])
		if errx != nil || erry != nil {
			if as[i] != bs[i] {
				return as[i] < bs[i]
			}
			continue
		}
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// builds caches BuildBinary results per package path for the whole process.
var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

// BuildBinary runs `go build` on pkg, a main package of this module given
// relative to the module root (e.g. "./cmd/autocapture"), once per test
// process, and returns the binary's path. The binary lives in a temporary
// directory that Main removes. Under -short the test skips: one that runs our
// binary as a process is a system test, and the builds alone are minutes of
// a 2-core machine.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	SkipShort(t, "runs "+pkg+" as a process, a system test")
	buildsMu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = &build{}
		builds[pkg] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.path, b.err = goBuild(pkg) })
	if b.err != nil {
		t.Fatalf("testenv: build %s: %v", pkg, b.err)
	}
	return b.path
}

// ProcessTempDir returns a new directory that lives until Main ends, for
// files several tests of a package share (a binary built once); t.TempDir's
// goes with the test that made it.
func ProcessTempDir(t testing.TB) string {
	t.Helper()
	if !mainActive.Load() {
		t.Fatalf("testenv: ProcessTempDir needs `func TestMain(m *testing.M) { testenv.Main(m) }` in this package")
	}
	dir, err := processSubdir("tmp-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dir
}

func goBuild(pkg string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go toolchain: %w", err)
	}
	dir, err := processSubdir("bin-")
	if err != nil {
		return "", err
	}
	name := filepath.Base(strings.TrimSuffix(pkg, "/"))
	if name == "." || name == "" {
		name = "main"
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(gobin, "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, b)
	}
	return out, nil
}

// ModuleRoot returns the directory holding this module's go.mod, found by
// walking up from the working directory (a test's package directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// processDir is this test process's directory for state that outlives a
// single test (built binaries, the PostgreSQL cluster); Main removes it.
var (
	procDirOnce sync.Once
	procDir     string
	procDirErr  error
)

const procDirPrefix = "autocapture-testenv-"

// processSubdir creates a fresh directory under the process directory,
// creating that first (and deleting those of test processes that died
// without Main cleaning up).
func processSubdir(prefix string) (string, error) {
	procDirOnce.Do(func() {
		removeStaleProcessDirs()
		procDir, procDirErr = os.MkdirTemp("", fmt.Sprintf("%s%d-", procDirPrefix, os.Getpid()))
		if procDirErr != nil {
			return
		}
		// Other users (postgres) must reach their own subdirectories.
		procDirErr = os.Chmod(procDir, 0o755)
		onShutdown(func() { os.RemoveAll(procDir) })
	})
	if procDirErr != nil {
		return "", procDirErr
	}
	return os.MkdirTemp(procDir, prefix)
}

// removeStaleProcessDirs deletes the process directories of test processes
// that no longer run (a panic or -timeout skips Main; their servers died
// with them through Pdeathsig, their files did not).
func removeStaleProcessDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), procDirPrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), procDirPrefix)
		pid, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '-'), 0)])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			os.RemoveAll(d)
		}
	}
}
