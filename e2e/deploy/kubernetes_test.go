package deploy

import (
	"bytes"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	goyaml "github.com/goccy/go-yaml"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/playbooks/vllm"
)

// kubeManifests are the files of deploy/kubernetes that are Kubernetes or
// Kustomize documents (not the chart values the base is rendered from).
func kubeManifests(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(kubeDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(kubeDir, p)
		if !strings.HasSuffix(p, ".yaml") || rel == "chart-values.yaml" {
			return nil
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	parallel(t)
	kinds := map[string]int{}
	for _, p := range kubeManifests(t) {
		for _, obj := range decodeFile(t, p) {
			kinds[typeName(obj)]++
		}
	}
	want := map[string]int{"Deployment": 2, "Service": 1, "ConfigMap": 1, "Secret": 2, "NetworkPolicy": 2, "PodDisruptionBudget": 1, "Kustomization": 2}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s documents, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
	// Strict: a misspelt field, one at the wrong level, a duplicate key.
	good, err := os.ReadFile(filepath.Join(kubeDir, "autocapture.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"misspelt", "  replicas: 2\n", "  replica: 2\n"},
		{"wrong level", "          imagePullPolicy: IfNotPresent\n", "          imagePullPolicy: IfNotPresent\n          runAsNonRoot: true\n"},
		{"duplicate", "  replicas: 2\n", "  replicas: 2\n  replicas: 3\n"},
	} {
		if !bytes.Contains(good, []byte(tc.from)) {
			t.Fatalf("autocapture.yaml no longer has %q", tc.from)
		}
		docs, err := yamlDocs(bytes.Replace(good, []byte(tc.from), []byte(tc.to), 1))
		failed := err != nil
		for _, d := range docs {
			_, err := decodeStrict(d)
			failed = failed || err != nil
		}
		if !failed {
			t.Errorf("%s field: decoded without an error", tc.name)
		}
	}
	if _, err := decodeStrict([]byte("apiVersion: apps/v1beta1\nkind: Deployment\n")); err == nil {
		t.Error("an old apiVersion decoded")
	}
}

// typeName is a decoded object's Go type without its package: Deployment.
func typeName(v any) string {
	n := fmt.Sprintf("%T", v)
	return n[strings.LastIndex(n, ".")+1:]
}

// TestKubernetesKustomizationLists: the base is the chart's rendering
// alone (TestKustomizeBaseIsTheChart holds it equal), nothing hand-kept
// beside it; the example Secrets stay out of it (an apply would overwrite
// the real ones).
func TestKubernetesKustomizationLists(t *testing.T) {
	parallel(t)
	var k kusttypes.Kustomization
	b, err := os.ReadFile(filepath.Join(kubeDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.Resources, []string{"autocapture.yaml"}) || len(k.ConfigMapGenerator)+len(k.SecretGenerator)+len(k.Patches) != 0 {
		t.Errorf("kustomization: resources %q, %d generators, %d patches: want the rendered chart alone",
			k.Resources, len(k.ConfigMapGenerator)+len(k.SecretGenerator), len(k.Patches))
	}
}

// kubeDaemon is the rendered base's daemon: its Deployment, container and
// config as the ConfigMap carries it (container paths).
type kubeDaemon struct {
	objs   kubeObjects
	dep    *appsv1.Deployment
	c      corev1.Container
	cfg    config.Config
	cfgRaw []byte
	cfgAt  string // the --config.file path
}

func renderDaemon(t *testing.T) kubeDaemon {
	t.Helper()
	d := kubeDaemon{objs: render(t, kubeDir)}
	d.dep = d.objs.deployments["autocapture"]
	if d.dep == nil || len(d.dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("no Deployment autocapture with one container")
	}
	d.c = d.dep.Spec.Template.Spec.Containers[0]
	if len(d.c.Args) != 2 || d.c.Args[0] != "serve" {
		t.Fatalf("container args %q: want [serve --config.file=…]", d.c.Args)
	}
	var ok bool
	if d.cfgAt, ok = flagValue(d.c.Args, "config.file"); !ok {
		t.Fatalf("container args %q: no --config.file", d.c.Args)
	}
	vol, _, key := mountedAt(d.dep.Spec.Template.Spec, d.c, d.cfgAt)
	if vol == nil || vol.ConfigMap == nil {
		t.Fatalf("--config.file %s is not on a ConfigMap volume", d.cfgAt)
	}
	cm := d.objs.configMaps[vol.ConfigMap.Name]
	if cm == nil {
		t.Fatalf("--config.file's ConfigMap %s is not in the base", vol.ConfigMap.Name)
	}
	data, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s (for %s)", cm.Name, key, d.cfgAt)
	}
	d.cfgRaw = []byte(data)
	d.cfg = config.Default()
	if err := goyaml.UnmarshalWithOptions(d.cfgRaw, &d.cfg, goyaml.Strict()); err != nil {
		t.Fatalf("the ConfigMap's config: %v", err)
	}
	return d
}

func TestKubernetesDeployment(t *testing.T) {
	parallel(t)
	d := renderDaemon(t)
	pod := d.dep.Spec.Template.Spec
	tmpl := d.dep.Spec.Template.Labels
	if d.dep.Spec.Replicas == nil || *d.dep.Spec.Replicas < 2 {
		t.Errorf("replicas %v: want 2 or more", d.dep.Spec.Replicas)
	}
	if d.cfg.Database.URLFile == "" && d.cfg.Database.URL == "" {
		t.Error("no database.url(_file): replicas need the shared PostgreSQL store")
	}

	// Ports: the config's listen port is the container's port "http",
	// which the Service, probes and NetworkPolicy name.
	_, listen, err := net.SplitHostPort(d.cfg.Web.ListenAddress)
	if err != nil {
		t.Fatal(err)
	}
	portNames := map[string]int32{}
	for _, p := range d.c.Ports {
		portNames[p.Name] = p.ContainerPort
	}
	if strconv.Itoa(int(portNames["http"])) != listen {
		t.Errorf("container port http %d, the config listens on %s", portNames["http"], listen)
	}
	for name, probe := range map[string]*corev1.Probe{"readiness": d.c.ReadinessProbe, "liveness": d.c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("no %s httpGet probe", name)
			continue
		}
		if want := map[string]string{"readiness": "/-/ready", "liveness": "/-/healthy"}[name]; probe.HTTPGet.Path != want {
			t.Errorf("%s probe path %s, want %s", name, probe.HTTPGet.Path, want)
		}
		if _, ok := portNames[probe.HTTPGet.Port.String()]; !ok {
			t.Errorf("%s probe port %s is no container port", name, probe.HTTPGet.Port.String())
		}
	}
	svc := d.objs.services["autocapture"]
	if svc == nil || len(svc.Spec.Ports) != 1 {
		t.Fatal("no Service autocapture with one port")
	}
	if _, ok := portNames[svc.Spec.Ports[0].TargetPort.String()]; !ok {
		t.Errorf("Service targetPort %s is no container port", svc.Spec.Ports[0].TargetPort.String())
	}
	if u, _ := url.Parse(d.cfg.Web.ExternalURL); u == nil || u.Port() != strconv.Itoa(int(svc.Spec.Ports[0].Port)) || !strings.HasPrefix(u.Hostname(), svc.Name+".") {
		t.Errorf("web.external_url %q is not the Service %s on port %d", d.cfg.Web.ExternalURL, svc.Name, svc.Spec.Ports[0].Port)
	}

	// Labels: one set of pod labels, selected by everything that selects.
	if !selects(t, d.dep.Spec.Selector, tmpl) {
		t.Errorf("the Deployment's selector does not pick its own pods")
	}
	if !selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, tmpl) {
		t.Errorf("the Service's selector %v does not pick the pods %v", svc.Spec.Selector, tmpl)
	}
	pdb := d.objs.pdbs["autocapture"]
	if pdb == nil || !selects(t, pdb.Spec.Selector, tmpl) {
		t.Error("no PodDisruptionBudget autocapture selecting the pods")
	} else if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.MinAvailable.IntValue() >= int(*d.dep.Spec.Replicas) {
		t.Errorf("PDB minAvailable %v with %d replicas: a drain could never evict, or could take all", pdb.Spec.MinAvailable, *d.dep.Spec.Replicas)
	}
	np := d.objs.policies["autocapture"]
	if np == nil || !selects(t, &np.Spec.PodSelector, tmpl) {
		t.Fatal("no NetworkPolicy autocapture selecting the pods")
	}
	for _, ts := range pod.TopologySpreadConstraints {
		if !selects(t, ts.LabelSelector, tmpl) {
			t.Errorf("topology spread on %s does not select the pods", ts.TopologyKey)
		}
	}

	// Security: the image's numeric user, nothing writable but volumes.
	df := parseDockerfile(t)
	user := last[*instructions.UserCommand](t, df.stages[len(df.stages)-1], "USER").User
	uid, _, _ := strings.Cut(user, ":")
	psc, csc := pod.SecurityContext, d.c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || strconv.FormatInt(*psc.RunAsUser, 10) != uid {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and runAsUser %s (the image's USER)", psc, uid)
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation, all capabilities dropped", csc)
	}
	if d.c.Resources.Requests.Cpu().IsZero() || d.c.Resources.Requests.Memory().IsZero() || d.c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", d.c.Resources)
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= 20 {
		t.Errorf("terminationGracePeriodSeconds %v: must exceed runs.shutdown_grace (20 s)", pod.TerminationGracePeriodSeconds)
	}

	// Every file the config names is mounted: secrets from a Secret with
	// that key in the example, the playbooks from their ConfigMap, and the
	// writable places on emptyDirs.
	example := kubeObjects{}
	for _, obj := range decodeFile(t, filepath.Join(kubeDir, "secret.example.yaml")) {
		example.add(t, obj)
	}
	for what, path := range map[string]string{
		"web.auth.bearer_token_file":        d.cfg.Web.Auth.BearerTokenFile,
		"database.url_file":                 d.cfg.Database.URLFile,
		"storage.s3.secret_access_key_file": d.cfg.Storage.S3.SecretAccessKeyFile,
		"profiling.agent_token_file":        d.cfg.Profiling.AgentTokenFile,
	} {
		ref := secretOf(t, pod, d.c, path)
		name, key, _ := strings.Cut(ref, "/")
		if ref == "" {
			t.Errorf("%s %s is not on a read-only Secret volume", what, path)
			continue
		}
		if sec := example.secrets[name]; sec == nil {
			t.Errorf("%s: Secret %s is not in secret.example.yaml", what, name)
		} else if _, ok := sec.StringData[key]; !ok {
			t.Errorf("%s: Secret %s has no key %s in secret.example.yaml", what, name, key)
		}
	}
	// The shipped playbooks come with the binary; yours, from the chart's playbooks value (TestHelmPlaybooks).
	if len(d.cfg.Playbooks) != 0 || !d.cfg.ShippedPlaybooks {
		t.Errorf("playbooks %q shipped %v: want the shipped set", d.cfg.Playbooks, d.cfg.ShippedPlaybooks)
	}
	for _, p := range []string{d.cfg.Storage.Path, "/tmp"} {
		if vol, _, _ := mountedAt(pod, d.c, p); vol == nil || vol.EmptyDir == nil {
			t.Errorf("%s is not an emptyDir: the root filesystem is read-only", p)
		}
	}

	// The NetworkPolicy admits the webhook port and lets out what the
	// config reaches.
	in := false
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			in = in || p.Port.String() == "http"
		}
	}
	if !in {
		t.Error("the NetworkPolicy admits no traffic to the http port")
	}
	egress := map[string]bool{}
	for _, r := range np.Spec.Egress {
		for _, p := range r.Ports {
			egress[p.Port.String()] = true
		}
	}
	dbURL, _ := url.Parse(example.secrets["autocapture"].StringData["database_url"])
	need := map[string]string{"DNS": "53", "vLLM": "8000", "the agents": agentPortOfPreset(t), "Slack": "443"}
	for what, raw := range map[string]string{"prometheus.url": d.cfg.Prometheus.URL, "traces.url": d.cfg.Traces.URL,
		"storage.s3.endpoint": d.cfg.Storage.S3.Endpoint, "database_url": dbURL.String()} {
		u, err := url.Parse(raw)
		if err != nil || u.Port() == "" {
			t.Errorf("%s %q: no port", what, raw)
			continue
		}
		need[what] = u.Port()
	}
	for what, p := range need {
		if !egress[p] {
			t.Errorf("the NetworkPolicy lets no traffic out to %s (port %s)", what, p)
		}
	}
}

// agentPortOfPreset is the port the shipped vllm-profile preset collects
// from (the alert instance's host).
func agentPortOfPreset(t *testing.T) string {
	t.Helper()
	b, err := vllm.FS.ReadFile("presets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), `"" .Labels.instance }}:`)
	if !ok || len(after) < 4 {
		t.Fatal("presets.yaml: no agent URL on the instance's host")
	}
	return strings.TrimRight(after[:strings.IndexAny(after, "'\"/")], " ")
}
