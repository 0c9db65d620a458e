package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"

	"github.com/autocapture/autocapture/deploy"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Shortened windows of the vLLM rules for the loopback topology, as e2e/
// shortens them: the shipped 5m window and 2m hold would not fire within
// the test's bound.
const (
	topologyRuleWindow = 30 * time.Second
	topologyRuleHold   = 10 * time.Second
	// topologyBound is how long the alert may take from Prometheus' start
	// to a finished run.
	topologyBound = 2 * time.Minute
)

// topology is compose.yaml mapped onto this machine's loopback. What is
// rewritten, and nothing else:
//
//   - every "service:port" a config, command or environment names, for each
//     port the service exposes → a 127.0.0.1 address with a free port (vllmsim
//     and its agent: one 127.0.0.x of their own, the agent keeping 9101, the
//     port the shipped profile preset derives from the instance);
//   - in a service's own command and files, its listen addresses
//     "0.0.0.0:port" and "=:port" → that same loopback address;
//   - container paths: each bind-mounted or secret file → the file in the
//     repository (config files from deploy/compose/ → a copy with the two
//     rewrites above), each named volume → a temporary folder (one per volume,
//     so vllmsim and the agent share theirs);
//   - the vLLM rules' rate windows and holds (deploy.AlertRules), the one
//     change that is not an address: the shipped 5m/2m would need 7 minutes.
//
// Jaeger has no config in the compose file (the image's defaults), so it is
// testenv's; minio-init's `mc mb` is done with the S3 SDK (no mc here), on
// the bucket name its command gives.
type topology struct {
	p       *types.Project
	dir     string
	ip      map[string]string // service owning a network namespace → its loopback IP
	addr    map[string]string // "service:port" → "ip:port" here
	volumes map[string]string // named volume → folder
	files   map[string]string // repo file → rewritten copy
}

func newTopology(t *testing.T, p *types.Project, keepPort map[string]bool) *topology {
	t.Helper()
	tp := &topology{p: p, dir: t.TempDir(), ip: map[string]string{}, addr: map[string]string{},
		volumes: map[string]string{}, files: map[string]string{}}
	for name, s := range p.Services {
		if tp.namespace(s) != name {
			continue
		}
		ip := "127.0.0.1"
		for hp := range keepPort {
			if h, fixed, _ := net.SplitHostPort(hp); h == name {
				ip = loopbackWithFreePort(t, fixed)
			}
		}
		tp.ip[name] = ip
		for _, pt := range exposed(s) {
			local := strconv.Itoa(testenv.FreePort(t))
			if keepPort[name+":"+pt] {
				local = pt
			}
			tp.addr[name+":"+pt] = net.JoinHostPort(ip, local)
		}
	}
	for name := range p.Volumes {
		tp.volumes[name] = filepath.Join(tp.dir, "volume-"+name)
		if err := os.MkdirAll(tp.volumes[name], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return tp
}

// namespace is the service whose network namespace s runs in.
func (tp *topology) namespace(s types.ServiceConfig) string {
	if owner, ok := strings.CutPrefix(s.NetworkMode, "service:"); ok {
		return owner
	}
	return s.Name
}

// rewrite applies the address and path rewrites of service s to text.
func (tp *topology) rewrite(t *testing.T, s types.ServiceConfig, text string) string {
	t.Helper()
	var pairs []string
	for from, to := range tp.addr {
		pairs = append(pairs, from, to)
	}
	ns := tp.namespace(s)
	for _, pt := range exposed(tp.p.Services[ns]) {
		local := tp.addr[ns+":"+pt]
		pairs = append(pairs, "0.0.0.0:"+pt, local, "=:"+pt, "="+local)
	}
	paths := map[string]string{}
	for target, src := range mountedFiles(t, tp.p, s) {
		if c, ok := tp.files[src]; ok {
			src = c
		}
		paths[target] = src
	}
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeVolume {
			paths[v.Target] = tp.volumes[v.Source]
		}
	}
	return rewritePaths(replaceLongestFirst(text, pairs), paths)
}

// copyConfigs writes the rewritten copy of every file s mounts from
// deploy/compose/ (secrets are read as they are), and override's contents
// for the files it names.
func (tp *topology) copyConfigs(t *testing.T, s types.ServiceConfig, override map[string][]byte) {
	t.Helper()
	composeDir := mustAbs(t, "compose")
	for _, src := range mountedFiles(t, tp.p, s) {
		b, ok := override[src]
		if !ok && (filepath.Dir(src) != composeDir) {
			continue
		}
		if !ok {
			var err error
			if b, err = os.ReadFile(src); err != nil {
				t.Fatal(err)
			}
			b = []byte(tp.rewrite(t, s, string(b)))
		}
		dst := filepath.Join(tp.dir, s.Name, filepath.Base(src))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tp.files[src] = dst
	}
}

// start runs bin with s's command (or cmd when s has none: the image's CMD)
// and environment, rewritten, and waits for ready (a path on s's first
// exposed port, or a full URL).
func (tp *topology) start(t *testing.T, name, bin string, cmd []string, ready string) *testenv.Process {
	t.Helper()
	s := service(t, tp.p, name)
	tp.copyConfigs(t, s, nil)
	if len(s.Command) > 0 {
		cmd = s.Command
	}
	args := make([]string, len(cmd))
	for i, a := range cmd {
		args[i] = tp.rewrite(t, s, a)
	}
	c := exec.Command(bin, args...)
	c.Env = os.Environ()
	for k, v := range s.Environment {
		c.Env = append(c.Env, k+"="+tp.rewrite(t, s, deref(v)))
	}
	proc := testenv.StartProcess(t, name, c)
	proc.WaitHTTP(t, ready, 60*time.Second)
	return proc
}

// url is http://<the loopback address of service:port>path.
func (tp *topology) url(t *testing.T, hostport, path string) string {
	t.Helper()
	a, ok := tp.addr[hostport]
	if !ok {
		t.Fatalf("topology: no address for %s", hostport)
	}
	return "http://" + a + path
}

// TestComposeTopologyOnLoopback starts compose.yaml's services from the
// binaries here, each with its compose command, environment and files,
// rewritten as topology says, and follows one alert: vllmsim's GEMM
// regression makes Prometheus fire a shipped vLLM rule, Alertmanager posts it
// with the secret token to autocapture, whose run goes through the three
// tiers (Prometheus, Jaeger, the agent on vllmsim's profiler folder) and
// stores its artifacts in MinIO's bucket.
func TestComposeTopologyOnLoopback(t *testing.T) {
	parallel(t)
	p := loadCompose(t)
	agent := service(t, p, "agent")
	agentPort := port(t, mustFlag(t, agent, "web.listen-address"))
	tp := newTopology(t, p, map[string]bool{"vllmsim:" + agentPort: true})
	acBin := testenv.BuildBinary(t, "./cmd/autocapture")
	simBin := testenv.BuildBinary(t, "./cmd/vllmsim")

	j := testenv.StartJaeger(t)
	tp.addr["jaeger:4317"] = j.OTLPGRPC
	tp.addr["jaeger:16686"] = strings.TrimPrefix(j.QueryURL, "http://")

	minio := service(t, p, "minio")
	tp.start(t, "minio", testenv.Tool(t, "minio"), nil, tp.url(t, "minio:9000", "/minio/health/ready"))
	password, err := os.ReadFile(p.Secrets["minio_root_password"].File)
	if err != nil {
		t.Fatal(err)
	}
	bucket := minioInitBucket(t, p)
	s3c := s3.New(s3.Options{
		Region: deref(minio.Environment["MINIO_REGION"]), BaseEndpoint: aws.String(tp.url(t, "minio:9000", "")), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(deref(minio.Environment["MINIO_ROOT_USER"]), strings.TrimSpace(string(password)), ""),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := testenv.CreateBucket(ctx, s3c, bucket); err != nil {
		t.Fatalf("minio-init's bucket %s: %v", bucket, err)
	}

	tp.start(t, "alertmanager", testenv.Tool(t, "prometheus-alertmanager"), nil, tp.url(t, "alertmanager:9093", "/-/ready"))
	tp.start(t, "vllmsim", simBin, nil, tp.url(t, "vllmsim:8000", "/health"))
	tp.start(t, "agent", acBin, nil, tp.url(t, "vllmsim:"+agentPort, "/healthz"))
	final := parseDockerfile(t).stages[len(parseDockerfile(t).stages)-1]
	imageCmd := last[*instructions.CmdCommand](t, final, "CMD").CmdLine
	tp.start(t, "autocapture", acBin, imageCmd, tp.url(t, "autocapture:9095", "/-/ready"))

	prom := service(t, p, "prometheus")
	rules, err := deploy.AlertRules(topologyRuleWindow, topologyRuleHold)
	if err != nil {
		t.Fatal(err)
	}
	tp.copyConfigs(t, prom, map[string][]byte{mustAbs(t, "prometheus/vllm-alerts.yml"): rules})
	started := time.Now()
	tp.start(t, "prometheus", testenv.Tool(t, "prometheus"), nil, tp.url(t, "prometheus:9090", "/-/ready"))

	token, err := os.ReadFile(p.Secrets["autocapture_token"].File)
	if err != nil {
		t.Fatal(err)
	}
	api := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, tp.url(t, "autocapture:9095", path), nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}

	var done *runs.Run
	for done == nil {
		if time.Since(started) > topologyBound {
			t.Fatalf("no finished run %s after Prometheus started", topologyBound)
		}
		time.Sleep(2 * time.Second)
		var page runs.Page
		api("/api/v1/runs", &page)
		for _, r := range page.Runs {
			if r.FinishedAt != nil {
				done = &r
			}
		}
	}
	t.Logf("alert %s → finished run %s (%s) %s after Prometheus started", done.Alertname, done.ID, done.Status, time.Since(started).Round(time.Second))
	var r runs.Run
	api("/api/v1/runs/"+done.ID, &r)
	if want := tp.addr["vllmsim:8000"]; r.Labels["instance"] != want || !strings.HasPrefix(r.Alertname, "VLLM") {
		t.Errorf("run for %s instance %q, want a VLLM alert on the sim's %s", r.Alertname, r.Labels["instance"], want)
	}
	if r.Status != vocab.StatusSucceeded || r.Verdict == nil || r.Verdict.ID != "unexplained" {
		t.Errorf("run %s verdict %v: want succeeded, unexplained", r.Status, r.Verdict)
	}
	tiers := map[vocab.Tier][]string{}
	for _, st := range r.Steps {
		t.Logf("step %s (%s, tier %s): %s %s %s", st.ID, st.Kind, st.Tier, st.Status, st.Reason, st.Summary)
		if st.Status == vocab.StatusSucceeded {
			tiers[st.Tier] = append(tiers[st.Tier], st.Kind)
		}
	}
	for tier, kind := range map[vocab.Tier]string{vocab.TierMetrics: "prometheus", vocab.TierTraces: "traces", vocab.TierProfile: "profile"} {
		if !slices.Contains(tiers[tier], kind) {
			t.Errorf("tier %s: no %s step succeeded (succeeded: %v)", tier, kind, tiers)
		}
	}

	// The artifacts are in the bucket, and Prometheus scrapes the daemon.
	out, err := s3c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil || len(out.Contents) == 0 {
		t.Errorf("bucket %s: %v objects, err %v", bucket, len(out.Contents), err)
	}
	var q struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	resp, err := http.Get(tp.url(t, "prometheus:9090", `/api/v1/query?query=up{job="autocapture"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || len(q.Data.Result) != 1 || q.Data.Result[0].Value[1] != "1" {
		t.Errorf("up{job=\"autocapture\"}: %+v (%v)", q.Data.Result, err)
	}
}

// loopbackWithFreePort picks a 127.0.0.x (x ≥ 2, from a random start) on
// which port is free: a fixed port on an address of its own, as a pod has.
func loopbackWithFreePort(t *testing.T, port string) string {
	t.Helper()
	start := rand.IntN(200)
	for i := range 250 {
		host := fmt.Sprintf("127.0.0.%d", 2+(start+i)%250)
		if l, err := net.Listen("tcp", net.JoinHostPort(host, port)); err == nil {
			l.Close()
			return host
		}
	}
	t.Fatalf("no 127.0.0.x with port %s free", port)
	return ""
}
