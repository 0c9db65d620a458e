package deploy

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// sampleVLLM is a user's vLLM Deployment before the component.
const sampleVLLM = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: llama
  labels: {app: vllm}
spec:
  replicas: 1
  selector: {matchLabels: {app: vllm}}
  template:
    metadata:
      labels: {app: vllm}
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.15.1
          args: [--model, meta-llama/Llama-3.1-8B-Instruct, --profiler-config, '{"profiler":"torch","torch_profiler_dir":"/profiles"}']
          ports: [{name: http, containerPort: 8000}]
`

// TestKubernetesVLLMComponent renders a vLLM Deployment with the vllm
// component, as a user's overlay would, and checks the sidecar it gets: the
// profiler folder shared with vLLM, the token from the daemon's Secret, the
// preset's port, and a NetworkPolicy admitting only the daemon's pods.
func TestKubernetesVLLMComponent(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "vllm.yaml"), []byte(sampleVLLM), 0o644))
	// Kustomize takes a component by relative path only.
	comp, err := filepath.Rel(dir, mustAbs(t, filepath.Join(kubeDir, "vllm")))
	must(t, err)
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [vllm.yaml]\ncomponents: [%s]\n", comp)
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644))
	objs := render(t, dir)
	dep := objs.deployments["llama"]
	if dep == nil {
		t.Fatal("the vLLM Deployment is not rendered")
	}
	pod := dep.Spec.Template.Spec
	var sim, agent *corev1.Container
	for i := range pod.Containers {
		switch pod.Containers[i].Name {
		case "vllm":
			sim = &pod.Containers[i]
		case "autocapture-agent":
			agent = &pod.Containers[i]
		}
	}
	if len(pod.Containers) != 2 || sim == nil || agent == nil || sim.Image != "vllm/vllm-openai:v0.15.1" || len(sim.Args) != 4 {
		t.Fatalf("containers after the patch: %+v", pod.Containers)
	}
	if agent.Args[0] != "agent" {
		t.Fatalf("agent args %q", agent.Args)
	}
	agentDir := mustFlagIn(t, agent.Args, "profiler.dir")
	simVol, _, _ := mountedAt(pod, *sim, "/profiles")
	agentVol, _, rest := mountedAt(pod, *agent, agentDir)
	if simVol == nil || agentVol == nil || simVol.Name != agentVol.Name || rest != "" || simVol.EmptyDir == nil {
		t.Errorf("vLLM's /profiles (%v) and the agent's --profiler.dir %s (%v) are not one emptyDir", simVol, agentDir, agentVol)
	}
	daemon := renderDaemon(t)
	agentRef := secretOf(t, pod, *agent, mustFlagIn(t, agent.Args, "web.token-file"))
	if daemonRef := secretOf(t, daemon.dep.Spec.Template.Spec, daemon.c, daemon.cfg.Profiling.AgentTokenFile); agentRef == "" || agentRef != daemonRef {
		t.Errorf("the agent's --web.token-file (%q) and the daemon's profiling.agent_token_file (%q) are not one Secret key", agentRef, daemonRef)
	}
	listen := mustFlagIn(t, agent.Args, "web.listen-address")
	if _, p, _ := net.SplitHostPort(listen); p != agentPortOfPreset(t) || len(agent.Ports) != 1 || fmt.Sprint(agent.Ports[0].ContainerPort) != p {
		t.Errorf("agent --web.listen-address=%s, ports %v: want the preset's port %s", listen, agent.Ports, agentPortOfPreset(t))
	}
	if agent.ReadinessProbe == nil || agent.ReadinessProbe.HTTPGet == nil || agent.ReadinessProbe.HTTPGet.Path != "/healthz" ||
		agent.ReadinessProbe.HTTPGet.Port.String() != agent.Ports[0].Name {
		t.Errorf("agent readiness probe %+v: want GET /healthz on its port", agent.ReadinessProbe)
	}
	if agent.SecurityContext == nil || agent.SecurityContext.ReadOnlyRootFilesystem == nil || !*agent.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the agent's root filesystem is writable")
	}
	np := objs.policies["autocapture-agent"]
	if np == nil || !selects(t, &np.Spec.PodSelector, dep.Spec.Template.Labels) {
		t.Fatal("no NetworkPolicy autocapture-agent selecting the vLLM pods")
	}
	admitsDaemon, vllmOpen := false, false
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port.String() == agentPortOfPreset(t) {
				for _, f := range r.From {
					admitsDaemon = admitsDaemon || selects(t, f.PodSelector, daemon.dep.Spec.Template.Labels)
				}
				if len(r.From) == 0 {
					t.Error("the agent's port is open to every source")
				}
			}
			vllmOpen = vllmOpen || p.Port.IntValue() == 8000
		}
	}
	if !admitsDaemon || !vllmOpen {
		t.Errorf("agent NetworkPolicy: admits the daemon's pods %v, keeps vLLM's port %v", admitsDaemon, vllmOpen)
	}
	runAgentAsPatched(t, agent)
}

// runAgentAsPatched starts the agent binary with the patch's args (paths and
// address moved here) and GETs its readiness probe.
func runAgentAsPatched(t *testing.T, agent *corev1.Container) {
	t.Helper()
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	must(t, os.WriteFile(tok, []byte("placeholder-agent-token\n"), 0o600))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := slices.Clone(agent.Args)
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--profiler.dir="):
			args[i] = "--profiler.dir=" + dir
		case strings.HasPrefix(a, "--web.token-file="):
			args[i] = "--web.token-file=" + tok
		case strings.HasPrefix(a, "--web.listen-address="):
			args[i] = "--web.listen-address=" + addr
		}
	}
	p := testenv.StartProcess(t, "agent", exec.Command(testenv.BuildBinary(t, "./cmd/autocapture"), args...))
	p.WaitHTTP(t, "http://"+addr+agent.ReadinessProbe.HTTPGet.Path, 30*time.Second)
}

// TestKubernetesProbesOnARealDaemon runs the daemon binary with the base's
// args and ConfigMap config (mounted paths moved to files here holding the
// example Secret's values, the PostgreSQL URL a real database's, the
// listen address and every outbound host on loopback) and GETs the
// Deployment's probe paths: 200 each, where an unknown path is 404.
func TestKubernetesProbesOnARealDaemon(t *testing.T) {
	parallel(t)
	d := renderDaemon(t)
	pod := d.dep.Spec.Template.Spec
	example := kubeObjects{}
	for _, obj := range decodeFile(t, filepath.Join(kubeDir, "secret.example.yaml")) {
		example.add(t, obj)
	}
	dir := t.TempDir()
	paths := map[string]string{}
	for _, m := range d.c.VolumeMounts {
		vol, _, _ := mountedAt(pod, d.c, m.MountPath)
		local := filepath.Join(dir, vol.Name)
		must(t, os.MkdirAll(local, 0o755))
		files := map[string]string{}
		switch {
		case vol.ConfigMap != nil:
			files = d.objs.configMapByPrefix(t, vol.ConfigMap.Name).Data
		case vol.Projected != nil:
			for _, src := range vol.Projected.Sources {
				for _, it := range src.Secret.Items {
					files[it.Path] = example.secrets[src.Secret.Name].StringData[it.Key]
					if it.Key == "database_url" {
						files[it.Path] = testenv.StartPostgres(t)
					}
				}
			}
		}
		for name, data := range files {
			must(t, os.WriteFile(filepath.Join(local, name), []byte(data), 0o600))
		}
		if m.SubPath != "" {
			local = filepath.Join(local, m.SubPath)
		}
		paths[m.MountPath] = local
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	var hosts []string
	for _, raw := range []string{d.cfg.Prometheus.URL, d.cfg.Traces.URL, d.cfg.Storage.S3.Endpoint, d.cfg.Web.ExternalURL} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		// Nothing listens there: the daemon starts and serves without them.
		hosts = append(hosts, u.Host, fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	}
	cfg := rewritePaths(replaceLongestFirst(string(d.cfgRaw), append(hosts, d.cfg.Web.ListenAddress, listen)), paths)
	must(t, os.WriteFile(paths[d.cfgAt], []byte(cfg), 0o644))

	bin := testenv.BuildBinary(t, "./cmd/autocapture")
	args := []string{d.c.Args[0], rewritePaths(d.c.Args[1], paths)}
	if out, err := exec.Command(bin, "check", args[1]).CombinedOutput(); err != nil {
		t.Fatalf("autocapture check %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	p := testenv.StartProcess(t, "autocapture", exec.Command(bin, args...))
	base := "http://" + listen
	p.WaitHTTP(t, base+d.c.ReadinessProbe.HTTPGet.Path, 60*time.Second)
	for _, probe := range []*corev1.Probe{d.c.ReadinessProbe, d.c.LivenessProbe} {
		if code := get(t, base+probe.HTTPGet.Path); code != http.StatusOK {
			t.Errorf("GET %s: %d", probe.HTTPGet.Path, code)
		}
	}
	if code := get(t, base+"/-/not-a-probe"); code != http.StatusNotFound {
		t.Errorf("GET an unknown path: %d, want 404 (else the probes prove nothing)", code)
	}
}

func get(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func mustFlagIn(t *testing.T, args []string, name string) string {
	t.Helper()
	v, ok := flagValue(args, name)
	if !ok || v == "" {
		t.Fatalf("args %q: no --%s=…", args, name)
	}
	return v
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
