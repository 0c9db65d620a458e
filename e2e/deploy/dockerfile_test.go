package deploy

import (
	"bytes"
	"debug/elf"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// No Docker engine runs here, so the Dockerfile is checked as BuildKit reads
// it (its own parser and instruction decoder, lint warnings as failures), and
// the go build it runs is run here with the same words and environment.

const repoRoot = ".."

// dockerfile is the parsed top-level Dockerfile.
type dockerfile struct {
	stages []instructions.Stage
	escape rune
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile: parser warning: %s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		t.Errorf("Dockerfile:%v: lint %s: %s", loc, rule, msg)
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return dockerfile{stages: stages, escape: res.EscapeToken}
}

// commands returns the commands of type T in stage s, in order.
func commands[T instructions.Command](s instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if v, ok := c.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// last returns the last command of type T in s, failing when there is none.
func last[T instructions.Command](t *testing.T, s instructions.Stage, what string) T {
	t.Helper()
	cs := commands[T](s)
	if len(cs) == 0 {
		t.Fatalf("the final stage has no %s", what)
	}
	return cs[len(cs)-1]
}

func (d dockerfile) stage(t *testing.T, name string) instructions.Stage {
	t.Helper()
	for _, s := range d.stages {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no stage named %q", name)
	return instructions.Stage{}
}

// goModVersion is the go directive of dir's go.mod.
func goModVersion(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no go directive", filepath.Join(dir, "go.mod"))
	}
	return string(m[1])
}

// imageConfig is deploy/docker/autocapture.yaml, the config the image runs with.
type imageConfig struct {
	Web struct {
		ListenAddress string `yaml:"listen_address"`
		Auth          struct {
			BearerTokenFile string `yaml:"bearer_token_file"`
		} `yaml:"auth"`
	} `yaml:"web"`
	Storage struct {
		Path string `yaml:"path"`
	} `yaml:"storage"`
}

func readImageConfig(t *testing.T) (imageConfig, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "docker", "autocapture.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c imageConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("deploy/docker/autocapture.yaml: %v", err)
	}
	return c, b
}

// minimalBases are final-stage bases without a shell, package manager or libc.
var minimalBases = regexp.MustCompile(`^(scratch|gcr\.io/distroless/static(-debian\d+)?(:[\w.-]+)?(@sha256:[0-9a-f]{64})?)$`)

func TestDockerfileStructure(t *testing.T) {
	parallel(t)
	d := parseDockerfile(t)
	if len(d.stages) < 2 {
		t.Fatalf("%d stages: want a builder and a runtime stage", len(d.stages))
	}
	builder := d.stage(t, "builder")
	final := d.stages[len(d.stages)-1]

	// The builder's Go is go.mod's.
	m := regexp.MustCompile(`^golang:(\d+\.\d+(?:\.\d+)?)(?:-[\w.]+)?(?:@sha256:[0-9a-f]{64})?$`).FindStringSubmatch(builder.BaseName)
	if m == nil {
		t.Fatalf("builder FROM %q: want golang:<go.mod version>[-variant]", builder.BaseName)
	}
	if want := goModVersion(t, repoRoot); m[1] != want {
		t.Errorf("builder uses Go %s, go.mod says %s", m[1], want)
	}

	// The runtime stage: minimal base, nothing run in it (it has no shell).
	if !minimalBases.MatchString(final.BaseName) {
		t.Errorf("final stage FROM %q: want scratch or distroless static", final.BaseName)
	}
	if runs := commands[*instructions.RunCommand](final); len(runs) > 0 {
		t.Errorf("the final stage RUNs %q: its base has no shell", runs[0].CmdLine)
	}

	// USER: not root, by name or by id, and numeric (Kubernetes' runAsNonRoot
	// can only verify a numeric user).
	user := last[*instructions.UserCommand](t, final, "USER").User
	uid, gid, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-zero uid", user)
	}
	if gid == "0" || gid == "root" {
		t.Errorf("USER %q: root group", user)
	}

	// ENTRYPOINT is the binary the builder's go build wrote.
	ep := last[*instructions.EntrypointCommand](t, final, "ENTRYPOINT")
	if ep.PrependShell || len(ep.CmdLine) != 1 {
		t.Fatalf("ENTRYPOINT %q: want the exec form naming the binary alone", ep.CmdLine)
	}
	bin := ep.CmdLine[0]
	out := goBuildWords(t, d).out
	copied := false
	for _, c := range commands[*instructions.CopyCommand](final) {
		if c.From == "builder" && slices.Equal(c.SourcePaths, []string{out}) && c.DestPath == bin {
			copied = true
		}
	}
	if !copied {
		t.Errorf("no COPY --from=builder %s %s: the ENTRYPOINT is not the binary built", out, bin)
	}

	// CMD serves with the image's config, which is copied where it names.
	cfgPath := "/etc/autocapture/autocapture.yaml"
	cmd := last[*instructions.CmdCommand](t, final, "CMD")
	if cmd.PrependShell || !slices.Equal(cmd.CmdLine, []string{"serve", "--config.file=" + cfgPath}) {
		t.Errorf("CMD %q: want [serve --config.file=%s]", cmd.CmdLine, cfgPath)
	}
	if !slices.ContainsFunc(commands[*instructions.CopyCommand](final), func(c *instructions.CopyCommand) bool {
		return c.From == "" && slices.Equal(c.SourcePaths, []string{"deploy/docker/autocapture.yaml"}) && c.DestPath == cfgPath
	}) {
		t.Errorf("the image's config is not copied to %s", cfgPath)
	}

	// HEALTHCHECK: exec form (no shell), the binary's own probe, on the same config.
	hc := last[*instructions.HealthCheckCommand](t, final, "HEALTHCHECK").Health
	if len(hc.Test) < 3 || hc.Test[0] != "CMD" || hc.Test[1] != bin || hc.Test[2] != "healthcheck" {
		t.Fatalf("HEALTHCHECK %q: want [CMD %s healthcheck …]", hc.Test, bin)
	}
	if !slices.Contains(hc.Test, "--config.file="+cfgPath) {
		t.Errorf("HEALTHCHECK %q does not probe the address %s configures", hc.Test, cfgPath)
	}
	if hc.Interval <= 0 || hc.Timeout <= 0 || hc.Timeout >= hc.Interval {
		t.Errorf("HEALTHCHECK interval %s, timeout %s", hc.Interval, hc.Timeout)
	}

	// EXPOSE is the port the config listens on; it is the daemon's default port.
	ic, _ := readImageConfig(t)
	host, port, err := net.SplitHostPort(ic.Web.ListenAddress)
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("image config web.listen_address %q: want 0.0.0.0:<port>", ic.Web.ListenAddress)
	}
	if _, defPort, _ := net.SplitHostPort(config.Default().Web.ListenAddress); port != defPort {
		t.Errorf("image listens on %s, the daemon's default port is %s", port, defPort)
	}
	var exposed []string
	for _, e := range commands[*instructions.ExposeCommand](final) {
		exposed = append(exposed, e.Ports...)
	}
	if !slices.Contains(exposed, port) && !slices.Contains(exposed, port+"/tcp") {
		t.Errorf("EXPOSE %q lacks %s", exposed, port)
	}
	if ic.Web.Auth.BearerTokenFile == "" {
		t.Error("the image's config listens beyond loopback without a bearer_token_file")
	}

	// VOLUME is storage.path, and the runtime user owns its mount point.
	var volumes []string
	for _, v := range commands[*instructions.VolumeCommand](final) {
		volumes = append(volumes, v.Volumes...)
	}
	if !slices.Contains(volumes, ic.Storage.Path) {
		t.Errorf("VOLUME %q lacks storage.path %s", volumes, ic.Storage.Path)
	}
	owned := slices.ContainsFunc(commands[*instructions.CopyCommand](final), func(c *instructions.CopyCommand) bool {
		return c.DestPath == ic.Storage.Path && c.Chown == user
	})
	if !owned {
		t.Errorf("%s is not created owned by %s: a fresh volume would not be writable", ic.Storage.Path, user)
	}
}

// goBuild is the builder's go build: its environment assignments, its
// arguments after `go`, and the path it writes.
type goBuild struct {
	env  []string
	args []string
	out  string
}

// goBuildWords finds the RUN that runs go build in the builder stage and
// splits it into words as a shell would, with the platform BuildKit passes
// (TARGETOS, TARGETARCH) set to this machine's.
func goBuildWords(t *testing.T, d dockerfile) goBuild {
	t.Helper()
	var line string
	for _, r := range commands[*instructions.RunCommand](d.stage(t, "builder")) {
		if len(r.CmdLine) == 1 && strings.Contains(r.CmdLine[0], "go build") {
			if line != "" {
				t.Fatal("more than one go build in the builder")
			}
			line = r.CmdLine[0]
		}
	}
	if line == "" {
		t.Fatal("the builder runs no go build")
	}
	if strings.ContainsAny(line, ";&|`") || strings.Contains(line, "$(") {
		t.Fatalf("the go build RUN is more than one command: %q", line)
	}
	env := shell.EnvsFromSlice([]string{"TARGETOS=" + runtime.GOOS, "TARGETARCH=" + runtime.GOARCH})
	words, err := shell.NewLex(d.escape).ProcessWords(line, env)
	if err != nil {
		t.Fatalf("go build line %q: %v", line, err)
	}
	var g goBuild
	i := 0
	for ; i < len(words) && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[i]); i++ {
		g.env = append(g.env, words[i])
	}
	if len(words) < i+2 || words[i] != "go" || words[i+1] != "build" {
		t.Fatalf("go build line %q (words %q): want [VAR=value…] go build …", line, words)
	}
	g.args = words[i+1:]
	for j, a := range g.args {
		if a == "-o" && j+1 < len(g.args) {
			g.out = g.args[j+1]
		}
	}
	if g.out == "" {
		t.Fatalf("go build line %q writes no -o path", line)
	}
	return g
}

func TestDockerfileGoBuildFlags(t *testing.T) {
	parallel(t)
	g := goBuildWords(t, parseDockerfile(t))
	if !slices.Contains(g.env, "CGO_ENABLED=0") {
		t.Errorf("go build env %q: want CGO_ENABLED=0 (a static binary for a libc-less base)", g.env)
	}
	if !slices.Contains(g.args, "-trimpath") {
		t.Errorf("go build %q: want -trimpath", g.args)
	}
	ld := ""
	for _, a := range g.args {
		if v, ok := strings.CutPrefix(a, "-ldflags="); ok {
			ld = v
		}
	}
	if f := strings.Fields(ld); !slices.Contains(f, "-s") || !slices.Contains(f, "-w") {
		t.Errorf("go build -ldflags %q: want -s -w (stripped)", ld)
	}
	if g.args[len(g.args)-1] != "./cmd/autocapture" {
		t.Errorf("go build %q does not build ./cmd/autocapture", g.args)
	}
}

// imageBinary runs the Dockerfile's go build here into a temporary folder
// (the -o path swapped, nothing else) and returns the binary. After the first
// test the build cache leaves only the link to do. Under -short the test
// skips: the Dockerfile's flags miss the ordinary build cache.
func imageBinary(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, "builds the binary as the Dockerfile does, minutes of compiling")
	image.once.Do(func() {
		image.err = fmt.Errorf("the image binary's build failed in %s", t.Name()) // until it succeeds
		g := goBuildWords(t, parseDockerfile(t))
		image.bin = filepath.Join(testenv.ProcessTempDir(t), "autocapture")
		args := slices.Clone(g.args)
		args[slices.Index(args, "-o")+1] = image.bin
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot // WORKDIR /src holds the whole module (COPY . .)
		cmd.Env = append(os.Environ(), g.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			image.err = fmt.Errorf("go %s with %q: %v\n%s", strings.Join(args, " "), g.env, err, out)
			return
		}
		image.err = nil
	})
	if image.err != nil {
		t.Fatal(image.err)
	}
	return image.bin
}

// image is the binary imageBinary builds, once for the package's tests: the
// Dockerfile's build flags share no compiled package with go test's.
var image struct {
	once sync.Once
	bin  string
	err  error
}

// TestDockerfileBuildsAStaticBinary: the Dockerfile's own go build command,
// run here, makes a static, stripped ELF for this platform: no interpreter,
// no dynamic section, no symbol table, so it runs on distroless static.
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	parallel(t)
	bin := imageBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: not an ELF: %v", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %s: the binary is dynamically linked", p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Error("the binary has a .dynamic section")
	}
	if s := f.Section(".symtab"); s != nil {
		t.Error("the binary has a symbol table: -ldflags=-s did not apply")
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary imports %q", libs)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image binary: %s/%s static ELF, %d bytes (%.1f MiB)", runtime.GOOS, runtime.GOARCH, st.Size(), float64(st.Size())/(1<<20))
}

// TestImageConfigRunsAndIsHealthy: the image's binary runs the image's CMD
// with the image's config (only its paths moved into a temporary folder and
// its port onto loopback), answers the webhook only with the token, and the
// HEALTHCHECK's exact command passes against it — then fails once it stopped.
func TestImageConfigRunsAndIsHealthy(t *testing.T) {
	parallel(t)
	bin := imageBinary(t)
	ic, raw := readImageConfig(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "bearer_token")
	if err := os.WriteFile(token, []byte("image-test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := testenv.FreePort(t)
	cfg := strings.NewReplacer(
		ic.Web.ListenAddress, fmt.Sprintf("127.0.0.1:%d", port),
		ic.Web.Auth.BearerTokenFile, token,
		ic.Storage.Path, filepath.Join(dir, "data"),
	).Replace(string(raw))
	cfgPath := filepath.Join(dir, "autocapture.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d := parseDockerfile(t)
	final := d.stages[len(d.stages)-1]
	// Only the paths of the image are swapped in the image's own argv.
	swap := func(argv []string) []string {
		out := make([]string, len(argv))
		for i, a := range argv {
			out[i] = strings.ReplaceAll(a, "/etc/autocapture/autocapture.yaml", cfgPath)
		}
		return out
	}
	cmdArgs := swap(last[*instructions.CmdCommand](t, final, "CMD").CmdLine)
	hcArgs := swap(last[*instructions.HealthCheckCommand](t, final, "HEALTHCHECK").Health.Test[2:])

	proc := testenv.StartProcess(t, "autocapture-image", exec.Command(bin, cmdArgs...))
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	proc.WaitHTTP(t, url+"/-/ready", 30*time.Second)
	resp, err := http.Post(url+"/hooks/alertmanager", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a webhook without the token: %d, want 401", resp.StatusCode)
	}
	if out, err := exec.Command(bin, hcArgs...).CombinedOutput(); err != nil {
		t.Fatalf("HEALTHCHECK %q on the running image config: %v\n%s", hcArgs, err, out)
	}
	proc.Stop()
	out, err := exec.Command(bin, hcArgs...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("HEALTHCHECK after the daemon stopped: %v (want exit 1)\n%s", err, out)
	}
}

// TestDockerignoreKeepsTheBuildInputs: the build context the .dockerignore
// leaves holds every file go build reads for ./cmd/autocapture (Go and
// embedded files of the module's packages, go.mod, go.sum) and each COPY
// source, and leaves out .git and test data.
func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	parallel(t)
	excluded := dockerignored(t)
	need := append([]string{"go.mod", "go.sum", "deploy/docker/autocapture.yaml"}, buildInputs(t, "./cmd/autocapture")...)
	if len(need) < 50 {
		t.Fatalf("go list named only %d files: %q", len(need), need)
	}
	for _, p := range need {
		if excluded(p) {
			t.Errorf(".dockerignore leaves out %s, which the build reads", p)
		}
	}
	for _, p := range []string{".git", "runner/testdata/x", "runner/service_test.go", "data/autocapture.db", "e2e/deploy/go.mod"} {
		if !excluded(p) {
			t.Errorf(".dockerignore keeps %s in the build context", p)
		}
	}
}

// dockerignored reads the repository's .dockerignore with BuildKit's own
// matcher and says whether a repo-relative path is left out of the context.
func dockerignored(t *testing.T) func(rel string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return func(rel string) bool {
		ex, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
}

// buildInputs lists, repo-relative, every Go and embedded file of the
// module's packages that `go build pkg` reads for a static linux binary.
func buildInputs(t *testing.T, pkg string) []string {
	t.Helper()
	list := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}`, pkg)
	list.Dir = repoRoot
	list.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel, err := filepath.Rel(root, fields[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range fields[1:] {
			files = append(files, filepath.ToSlash(filepath.Join(rel, name)))
		}
	}
	return files
}
