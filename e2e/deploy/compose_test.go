package deploy

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/goccy/go-yaml"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/playbooks/vllm"
)

// imageConfigPath is where the image's CMD and HEALTHCHECK read the config.
const imageConfigPath = "/etc/autocapture/autocapture.yaml"

// A file the strict loader must refuse shows that it is strict.
func TestComposeLoaderIsStrict(t *testing.T) {
	parallel(t)
	good, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"unknown service field", "    stop_grace_period: 40s\n", "    stop_grace_period: 40s\n    restart_policy: always\n", "restart_policy"},
		{"undeclared secret", "      - source: agent_token\n        target: /run/secrets/agent_token\n    depends_on: [vllmsim]", "      - source: agent_tokn\n        target: /run/secrets/agent_token\n    depends_on: [vllmsim]", "agent_tokn"},
		{"unknown top-level key", "\nsecrets:\n", "\nsecret:\n  x: {}\nsecrets:\n", "secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(good), tc.from) {
				t.Fatalf("compose.yaml no longer contains %q", tc.from)
			}
			bad := strings.Replace(string(good), tc.from, tc.to, 1)
			// Beside the original, so its relative paths still resolve.
			path := filepath.Join("compose", ".strict-"+strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(path)
			_, err := loadComposeFile(t, path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("loading with %s: err %v, want one naming %q", tc.name, err, tc.want)
			}
		})
	}
}

func TestComposeFilesExist(t *testing.T) {
	parallel(t)
	p := loadCompose(t)
	repo, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for name, sec := range p.Secrets {
		fi, err := os.Stat(sec.File)
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("secret %s: file %s: %v", name, sec.File, err)
		} else if b, _ := os.ReadFile(sec.File); strings.TrimSpace(string(b)) == "" {
			t.Errorf("secret %s: %s is empty (the daemon and agent refuse empty token files)", name, sec.File)
		}
	}
	for _, s := range p.Services {
		for target, src := range mountedFiles(t, p, s) {
			rel, err := filepath.Rel(repo, src)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: %s is mounted from %s, outside the repository", s.Name, target, src)
				continue
			}
			if fi, err := os.Stat(src); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("%s: %s is mounted from %s, not a file in the repository: %v", s.Name, target, rel, err)
			}
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind && !v.ReadOnly {
				t.Errorf("%s: bind mount %s is writable; configs are mounted :ro", s.Name, v.Target)
			}
		}
		for _, pc := range s.Ports {
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("%s: port %d published on %q, want 127.0.0.1 only", s.Name, pc.Target, pc.HostIP)
			}
			if !slices.Contains(exposed(s), strconv.Itoa(int(pc.Target))) {
				t.Errorf("%s: publishes %d, which it does not expose", s.Name, pc.Target)
			}
		}
	}
}

// TestComposeBuildTargets: each build names a stage of the top-level
// Dockerfile, and the vllmsim stage runs the binary its builder builds.
func TestComposeBuildTargets(t *testing.T) {
	parallel(t)
	p := loadCompose(t)
	d := parseDockerfile(t)
	for _, s := range p.Services {
		if s.Build == nil {
			continue
		}
		if got, want := filepath.Clean(s.Build.Context), mustAbs(t, repoRoot); got != want {
			t.Errorf("%s: build context %s, want the repository root %s", s.Name, got, want)
		}
		d.stage(t, s.Build.Target) // fails when missing
	}
	if got := service(t, p, "autocapture").Build.Target; got != d.stages[len(d.stages)-1].Name {
		t.Errorf("autocapture builds target %q, not the Dockerfile's final stage %q", got, d.stages[len(d.stages)-1].Name)
	}
	sim := d.stage(t, "vllmsim")
	ep := last[*instructions.EntrypointCommand](t, sim, "ENTRYPOINT")
	built := false
	for _, r := range commands[*instructions.RunCommand](d.stage(t, "vllmsim-builder")) {
		if strings.Contains(r.CmdLine[0], "go build") && strings.Contains(r.CmdLine[0], "./cmd/vllmsim") &&
			strings.Contains(r.CmdLine[0], "-o /out/vllmsim") && strings.Contains(r.CmdLine[0], "CGO_ENABLED=0") {
			built = true
		}
	}
	if !built {
		t.Error("vllmsim-builder does not build ./cmd/vllmsim statically into /out/vllmsim")
	}
	if !slices.Equal(ep.CmdLine, []string{"/vllmsim"}) {
		t.Errorf("vllmsim ENTRYPOINT %q", ep.CmdLine)
	}
	if !minimalBases.MatchString(sim.BaseName) {
		t.Errorf("vllmsim stage FROM %q: want distroless static", sim.BaseName)
	}
}

// promConfig is the part of prometheus.yml the topology depends on
// (promtool check config validates the whole file).
type promConfig struct {
	RuleFiles []string `yaml:"rule_files"`
	Alerting  struct {
		Alertmanagers []struct {
			StaticConfigs []staticConfig `yaml:"static_configs"`
		} `yaml:"alertmanagers"`
	} `yaml:"alerting"`
	ScrapeConfigs []struct {
		JobName       string         `yaml:"job_name"`
		Scheme        string         `yaml:"scheme"`
		MetricsPath   string         `yaml:"metrics_path"`
		StaticConfigs []staticConfig `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

type staticConfig struct {
	Targets []string `yaml:"targets"`
}

// amConfig is the part of alertmanager.yml the topology depends on
// (amtool check-config validates the whole file).
type amConfig struct {
	Receivers []struct {
		Name           string `yaml:"name"`
		WebhookConfigs []struct {
			URL        string `yaml:"url"`
			HTTPConfig struct {
				Authorization struct {
					CredentialsFile string `yaml:"credentials_file"`
				} `yaml:"authorization"`
			} `yaml:"http_config"`
		} `yaml:"webhook_configs"`
	} `yaml:"receivers"`
}

// composeConfigs are the files the compose's services read.
type composeConfigs struct {
	prom promConfig
	am   amConfig
	// raw is autocapture's config as written (container paths), decoded
	// strictly into the daemon's own type.
	raw config.Config
}

func readComposeConfigs(t *testing.T, p *types.Project) composeConfigs {
	t.Helper()
	var c composeConfigs
	read := func(svc, path string, into any, opts ...yaml.DecodeOption) {
		src, ok := mountedFiles(t, p, service(t, p, svc))[path]
		if !ok {
			t.Fatalf("%s: nothing mounted at %s", svc, path)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalWithOptions(b, into, opts...); err != nil {
			t.Fatalf("%s: %s: %v", svc, src, err)
		}
	}
	read("prometheus", mustFlag(t, service(t, p, "prometheus"), "config.file"), &c.prom)
	read("alertmanager", mustFlag(t, service(t, p, "alertmanager"), "config.file"), &c.am)
	c.raw = config.Default()
	read("autocapture", imageConfigPath, &c.raw, yaml.Strict())
	return c
}

// TestComposeConfigsAgree: every file a service's flags name is mounted, and
// every address one service's config gives for another is that service's
// name and a port it serves.
func TestComposeConfigsAgree(t *testing.T) {
	parallel(t)
	p := loadCompose(t)
	c := readComposeConfigs(t, p)
	prom, am, ac := service(t, p, "prometheus"), service(t, p, "alertmanager"), service(t, p, "autocapture")
	sim, agent, minio := service(t, p, "vllmsim"), service(t, p, "agent"), service(t, p, "minio")
	listenPort := func(s types.ServiceConfig, flag string) string {
		v, ok := flagValue(s.Command, flag)
		if !ok {
			t.Fatalf("%s: no --%s", s.Name, flag)
		}
		pt := port(t, v)
		if !slices.Contains(exposed(s), pt) {
			t.Errorf("%s listens on %s, which it does not expose", s.Name, pt)
		}
		return pt
	}
	promPort, amPort := listenPort(prom, "web.listen-address"), listenPort(am, "web.listen-address")
	simPort := listenPort(sim, "web.listen-address")
	acPort := port(t, c.raw.Web.ListenAddress)
	if !slices.Contains(exposed(ac), acPort) {
		t.Errorf("autocapture listens on %s, which it does not expose", acPort)
	}

	// Flags and config fields naming files: each is mounted.
	for _, f := range []struct {
		svc  types.ServiceConfig
		path string
		what string
	}{
		{prom, mustFlag(t, prom, "config.file"), "--config.file"},
		{am, mustFlag(t, am, "config.file"), "--config.file"},
		{ac, imageConfigPath, "the image's --config.file"},
		{ac, c.raw.Web.Auth.BearerTokenFile, "web.auth.bearer_token_file"},
		{ac, c.raw.Storage.S3.SecretAccessKeyFile, "storage.s3.secret_access_key_file"},
		{ac, c.raw.Profiling.AgentTokenFile, "profiling.agent_token_file"},
		{agent, mustFlag(t, agent, "web.token-file"), "--web.token-file"},
		{minio, deref(minio.Environment["MINIO_ROOT_PASSWORD_FILE"]), "MINIO_ROOT_PASSWORD_FILE"},
	} {
		if _, ok := mountedFiles(t, p, f.svc)[deref(f.path)]; !ok {
			t.Errorf("%s: %s %q is not mounted", f.svc.Name, f.what, deref(f.path))
		}
	}
	for _, rf := range c.prom.RuleFiles {
		src, ok := mountedFiles(t, p, prom)[rf]
		if !ok {
			t.Errorf("prometheus: rule file %s is not mounted", rf)
			continue
		}
		if filepath.Dir(src) != mustAbs(t, "prometheus") {
			t.Errorf("prometheus: rule file %s comes from %s, not the shipped deploy/prometheus/", rf, src)
		}
	}
	if got := mountedFiles(t, p, prom)["/etc/prometheus/rules/vllm-alerts.yml"]; got != mustAbs(t, "prometheus/vllm-alerts.yml") {
		t.Errorf("the shipped vLLM rules are not mounted (%q)", got)
	}

	// One secret on both ends of each authenticated hop.
	sameSecret := func(what string, a types.ServiceConfig, pa string, b types.ServiceConfig, pb string) {
		sa, sb := secretAt(a, pa), secretAt(b, pb)
		if sa == "" || sa != sb {
			t.Errorf("%s: %s reads secret %q at %s, %s reads %q at %s", what, a.Name, sa, pa, b.Name, sb, pb)
		}
	}
	var hookURL, credentials string
	for _, r := range c.am.Receivers {
		if r.Name == "autocapture" && len(r.WebhookConfigs) == 1 {
			hookURL, credentials = r.WebhookConfigs[0].URL, r.WebhookConfigs[0].HTTPConfig.Authorization.CredentialsFile
		}
	}
	hook, err := url.Parse(hookURL)
	if err != nil || hookURL == "" {
		t.Fatalf("alertmanager: no autocapture receiver with one webhook URL (%q: %v)", hookURL, err)
	}
	if hook.Host != "autocapture:"+acPort || hook.Path != "/hooks/alertmanager" || hook.Scheme != "http" {
		t.Errorf("alertmanager posts to %s, autocapture serves http://autocapture:%s/hooks/alertmanager", hook, acPort)
	}
	sameSecret("webhook token", am, credentials, ac, c.raw.Web.Auth.BearerTokenFile)
	sameSecret("agent token", agent, mustFlag(t, agent, "web.token-file"), ac, c.raw.Profiling.AgentTokenFile)
	sameSecret("MinIO secret key", minio, deref(minio.Environment["MINIO_ROOT_PASSWORD_FILE"]), ac, c.raw.Storage.S3.SecretAccessKeyFile)

	// Prometheus: alerts to Alertmanager, scrapes the sim and the daemon.
	var amTargets []string
	for _, a := range c.prom.Alerting.Alertmanagers {
		amTargets = append(amTargets, staticTargets(a.StaticConfigs)...)
	}
	if !slices.Equal(amTargets, []string{"alertmanager:" + amPort}) {
		t.Errorf("prometheus alerts %q, want [alertmanager:%s]", amTargets, amPort)
	}
	jobs := map[string][]string{}
	for _, sc := range c.prom.ScrapeConfigs {
		jobs[sc.JobName] = staticTargets(sc.StaticConfigs)
		if (sc.MetricsPath != "" && sc.MetricsPath != "/metrics") || (sc.Scheme != "" && sc.Scheme != "http") {
			t.Errorf("job %s scrapes %s://…%s", sc.JobName, sc.Scheme, sc.MetricsPath)
		}
	}
	simInstance := "vllmsim:" + simPort
	if !slices.Equal(jobs["vllm"], []string{simInstance}) || !slices.Equal(jobs["autocapture"], []string{"autocapture:" + acPort}) {
		t.Errorf("prometheus scrapes %v, want vllm [%s] and autocapture [autocapture:%s]", jobs, simInstance, acPort)
	}

	// autocapture's outbound URLs are the services'.
	for _, u := range []struct{ what, got, want string }{
		{"prometheus.url", c.raw.Prometheus.URL, "http://prometheus:" + promPort},
		{"storage.s3.endpoint", c.raw.Storage.S3.Endpoint, "http://minio:" + port(t, mustArgAfter(t, minio, "--address"))},
		// Jaeger's query API (the image's default port, exposed).
		{"traces.url", c.raw.Traces.URL, "http://jaeger:16686"},
	} {
		if u.got != u.want {
			t.Errorf("autocapture %s = %q, want %q", u.what, u.got, u.want)
		}
	}
	if !slices.Contains(exposed(service(t, p, "jaeger")), "16686") || !slices.Contains(exposed(service(t, p, "jaeger")), "4317") {
		t.Error("jaeger does not expose 16686 (query) and 4317 (OTLP gRPC)")
	}
	if c.raw.Storage.Backend != "s3" || !c.raw.Storage.S3.PathStyle {
		t.Errorf("autocapture storage %q path_style %v: want s3, path-style (MinIO)", c.raw.Storage.Backend, c.raw.Storage.S3.PathStyle)
	}
	if got := deref(minio.Environment["MINIO_ROOT_USER"]); got != c.raw.Storage.S3.AccessKeyID {
		t.Errorf("autocapture signs as %q, MinIO's root user is %q", c.raw.Storage.S3.AccessKeyID, got)
	}
	if got := minioInitBucket(t, p); got != c.raw.Storage.S3.Bucket {
		t.Errorf("minio-init creates bucket %q, autocapture writes to %q", got, c.raw.Storage.S3.Bucket)
	}

	// vllmsim: spans to Jaeger, tagged with the instance Prometheus labels it with.
	if got := mustFlag(t, sim, "otlp-endpoint"); got != "jaeger:4317" {
		t.Errorf("vllmsim exports spans to %q, want jaeger:4317", got)
	}
	if got := deref(sim.Environment["OTEL_RESOURCE_ATTRIBUTES"]); got != "service.instance.id="+simInstance {
		t.Errorf("vllmsim OTEL_RESOURCE_ATTRIBUTES %q, want service.instance.id=%s (the traces step matches it)", got, simInstance)
	}
	if got, _ := flagValue(sim.Command, "service-name"); got != "" && got != c.raw.Traces.Service {
		t.Errorf("vllmsim service name %q, autocapture looks for %q", got, c.raw.Traces.Service)
	}

	// The agent: vllmsim's network namespace, its profiler volume, the
	// preset's port, and both addresses admitted by targets.allow.
	if agent.NetworkMode != "service:vllmsim" {
		t.Errorf("agent network_mode %q, want service:vllmsim (a sidecar)", agent.NetworkMode)
	}
	profDir := mustFlag(t, sim, "profiler-dir")
	if v := namedVolumeAt(sim, profDir); v == "" || v != namedVolumeAt(agent, mustFlag(t, agent, "profiler.dir")) {
		t.Errorf("vllmsim writes profiles to %s, the agent serves %s: not one volume", profDir, mustFlag(t, agent, "profiler.dir"))
	}
	agentPort := port(t, mustFlag(t, agent, "web.listen-address"))
	presets, err := vllm.FS.ReadFile("presets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(presets), `"" .Labels.instance }}:`+agentPort+`'`) {
		t.Errorf("the agent listens on %s, not where the shipped vllm-profile preset looks", agentPort)
	}
	if !slices.Contains(exposed(sim), agentPort) {
		t.Errorf("vllmsim's namespace does not expose the agent's port %s", agentPort)
	}
	for _, hp := range []string{simInstance, "vllmsim:" + agentPort} {
		if !slices.Contains(c.raw.Targets.Allow, hp) {
			t.Errorf("targets.allow %q does not admit %s", c.raw.Targets.Allow, hp)
		}
	}
	if sc, _ := flagValue(sim.Command, "scenario"); sc != "unexplained" {
		t.Errorf("vllmsim scenario %q: want unexplained, the one that reaches tier 3", sc)
	}
}

// TestComposeNamesOnlyServices: every host:port in a config or command that
// names a compose service names a port that service exposes (a renamed
// service or moved port cannot leave a stale address behind).
func TestComposeNamesOnlyServices(t *testing.T) {
	parallel(t)
	p := loadCompose(t)
	hostPort := regexp.MustCompile(`\b([a-z][a-z0-9-]*):(\d{2,5})\b`)
	check := func(where, text string) {
		for _, m := range hostPort.FindAllStringSubmatch(text, -1) {
			s, ok := p.Services[m[1]]
			if !ok {
				continue
			}
			if !slices.Contains(exposed(s), m[2]) {
				t.Errorf("%s names %s:%s; %s exposes %v", where, m[1], m[2], m[1], exposed(s))
			}
		}
	}
	seen := map[string]bool{}
	for _, s := range p.Services {
		check(s.Name+" command", strings.Join(s.Command, " "))
		for k, v := range s.Environment {
			check(s.Name+" "+k, deref(v))
		}
		for _, src := range mountedFiles(t, p, s) {
			if seen[src] || strings.Contains(src, "/secrets/") {
				continue
			}
			seen[src] = true
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			check(src, string(b))
		}
	}
	if len(seen) < 4 {
		t.Errorf("only %d config files checked", len(seen))
	}
}

// The autocapture config, with its container paths pointed at the mounted
// files here, passes the daemon's own validation (file:line:col errors).
func TestComposeAutocaptureConfigValid(t *testing.T) {
	parallel(t)
	p := loadCompose(t)
	ac := service(t, p, "autocapture")
	files := mountedFiles(t, p, ac)
	b, err := os.ReadFile(files[imageConfigPath])
	if err != nil {
		t.Fatal(err)
	}
	text := rewritePaths(string(b), files, map[string]string{"/var/lib/autocapture": t.TempDir()})
	if _, err := config.Parse(files[imageConfigPath], []byte(text)); err != nil {
		t.Errorf("autocapture config: %v", err)
	}
}

// The Prometheus and Alertmanager configs pass their own tools' checks, with
// the container paths they name (rule files, the credentials file) pointed at
// the files mounted there.
func TestComposePromtoolAmtool(t *testing.T) {
	parallel(t)
	p := loadCompose(t)
	for _, tc := range []struct{ svc, tool, args, want string }{
		{"prometheus", "promtool", "check config", "SUCCESS"},
		{"alertmanager", "amtool", "check-config", "SUCCESS"},
	} {
		s := service(t, p, tc.svc)
		files := mountedFiles(t, p, s)
		src := files[mustFlag(t, s, "config.file")]
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), filepath.Base(src))
		if err := os.WriteFile(path, []byte(rewritePaths(string(b), files)), 0o644); err != nil {
			t.Fatal(err)
		}
		out := run(t, tc.tool, append(strings.Fields(tc.args), path)...)
		if !strings.Contains(out, tc.want) {
			t.Errorf("%s %s %s:\n%s", tc.tool, tc.args, src, out)
		}
		if tc.svc == "prometheus" && !strings.Contains(out, "5 rules found") {
			t.Errorf("promtool did not read the shipped vLLM rules:\n%s", out)
		}
	}
}

// rewritePaths replaces each container path (a mount target, or a volume's
// mount point) in text with the path here. A path is replaced only where it
// starts a path (after a space, quote, = or :, or at the start) and ends one
// (before a / or a character that cannot be in a name), longest first: the
// volume /alertmanager is not the tail of the URL /hooks/alertmanager, and
// /run/secrets/agent would not be the head of /run/secrets/agent_token.
func rewritePaths(text string, mounts ...map[string]string) string {
	var from []string
	to := map[string]string{}
	for _, m := range mounts {
		for k, v := range m {
			from = append(from, k)
			to[k] = v
		}
	}
	slices.SortFunc(from, func(a, b string) int { return len(b) - len(a) })
	inName := func(c byte) bool {
		return c == '_' || c == '.' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		matched := ""
		if i == 0 || !(inName(text[i-1]) || text[i-1] == '/') {
			for _, f := range from {
				if strings.HasPrefix(text[i:], f) && (i+len(f) == len(text) || !inName(text[i+len(f)])) {
					matched = f
					break
				}
			}
		}
		if matched == "" {
			b.WriteByte(text[i])
			i++
			continue
		}
		b.WriteString(to[matched])
		i += len(matched)
	}
	return b.String()
}

// replaceLongestFirst applies old→new pairs, longer olds first.
func replaceLongestFirst(text string, pairs []string) string {
	type kv struct{ k, v string }
	var kvs []kv
	for i := 0; i+1 < len(pairs); i += 2 {
		kvs = append(kvs, kv{pairs[i], pairs[i+1]})
	}
	slices.SortFunc(kvs, func(a, b kv) int { return len(b.k) - len(a.k) })
	var flat []string
	for _, p := range kvs {
		flat = append(flat, p.k, p.v)
	}
	return strings.NewReplacer(flat...).Replace(text)
}

// minioInitBucket is the bucket the minio-init service's `mc mb` creates.
func minioInitBucket(t *testing.T, p *types.Project) string {
	t.Helper()
	m := regexp.MustCompile(`mc mb (?:--ignore-existing )?local/([a-z0-9.-]+)`).FindStringSubmatch(strings.Join(service(t, p, "minio-init").Command, " "))
	if m == nil {
		t.Fatal("minio-init runs no `mc mb local/<bucket>`")
	}
	return m[1]
}

func staticTargets(scs []staticConfig) []string {
	var out []string
	for _, sc := range scs {
		out = append(out, sc.Targets...)
	}
	return out
}

func mustFlag(t *testing.T, s types.ServiceConfig, name string) string {
	t.Helper()
	v, ok := flagValue(s.Command, name)
	if !ok || v == "" {
		t.Fatalf("%s: no --%s=…", s.Name, name)
	}
	return v
}

func mustArgAfter(t *testing.T, s types.ServiceConfig, flag string) string {
	t.Helper()
	i := slices.Index(s.Command, flag)
	if i < 0 || i+1 >= len(s.Command) {
		t.Fatalf("%s: no %s <value>", s.Name, flag)
	}
	return s.Command[i+1]
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func deref(s any) string {
	switch v := s.(type) {
	case *string:
		if v == nil {
			return ""
		}
		return *v
	case string:
		return v
	}
	return ""
}

// The vllmsim target builds from the same context: .dockerignore keeps every
// file `go build ./cmd/vllmsim` reads (it once left out the vllmsim/ package
// with a pattern meant for a stray binary).
func TestDockerignoreKeepsVllmsim(t *testing.T) {
	parallel(t)
	excluded := dockerignored(t)
	files := buildInputs(t, "./cmd/vllmsim")
	for _, p := range files {
		if excluded(p) {
			t.Errorf(".dockerignore leaves out %s, which the vllmsim build reads", p)
		}
	}
	if len(files) < 10 {
		t.Fatalf("go list named only %d files", len(files))
	}
}

func TestRewritePaths(t *testing.T) {
	parallel(t)
	m := map[string]string{"/alertmanager": "/tmp/am", "/run/secrets/agent": "/x/a", "/run/secrets/agent_token": "/x/t", "/profiles": "/tmp/p"}
	for _, tc := range []struct{ in, want string }{
		{"--storage.path=/alertmanager", "--storage.path=/tmp/am"},
		{"url: http://a:9095/hooks/alertmanager", "url: http://a:9095/hooks/alertmanager"},
		{"file: /run/secrets/agent_token\n", "file: /x/t\n"},
		{`["/run/secrets/agent"]`, `["/x/a"]`},
		{"--dir=/profiles --x=/profiles/sub /profilesx", "--dir=/tmp/p --x=/tmp/p/sub /profilesx"},
	} {
		if got := rewritePaths(tc.in, m); got != tc.want {
			t.Errorf("rewritePaths(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
