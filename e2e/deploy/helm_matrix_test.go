package deploy

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestHelmDefaults: one replica on SQLite with a claim, rolled by Recreate
// (a ReadWriteOnce claim), no PDB or spread, the restricted profile, and a
// grace period past runs.shutdown_grace.
func TestHelmDefaults(t *testing.T) {
	parallel(t)
	objs := renderChart(t, nil)
	dep, c, cfg := chartDaemon(t, objs)
	pod := dep.Spec.Template.Spec
	if *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != "Recreate" || len(objs.pdbs) != 0 || len(pod.TopologySpreadConstraints) != 0 {
		t.Errorf("replicas %d, strategy %s, %d PDBs, spread %v: want one replica, Recreate, none", *dep.Spec.Replicas, dep.Spec.Strategy.Type, len(objs.pdbs), pod.TopologySpreadConstraints)
	}
	if cfg.Database.URL != "" || cfg.Database.URLFile != "" {
		t.Errorf("database %+v: want the embedded SQLite", cfg.Database)
	}
	vol, _, _ := mountedAt(pod, c, cfg.Storage.Path)
	if vol == nil || vol.PersistentVolumeClaim == nil || objs.pvcs[vol.PersistentVolumeClaim.ClaimName] == nil {
		t.Errorf("storage.path %s is not on the chart's claim (%v)", cfg.Storage.Path, vol)
	}
	if len(objs.monitors)+len(objs.rules) != 0 {
		t.Error("operator objects rendered without the CRDs")
	}
	checkRestricted(t, pod, c)
	grace, err := time.ParseDuration("20s")
	must(t, err)
	if cfg.Runs.ShutdownGrace != grace || *pod.TerminationGracePeriodSeconds != 40 {
		t.Errorf("shutdown_grace %s, terminationGracePeriodSeconds %d: want 20 s + the 20 s margin", cfg.Runs.ShutdownGrace, *pod.TerminationGracePeriodSeconds)
	}
	longer := renderChart(t, []string{valuesFile(t, "config: {runs: {shutdown_grace: 1m30s}}\n")})
	if d, _, _ := chartDaemon(t, longer); *d.Spec.Template.Spec.TerminationGracePeriodSeconds != 110 {
		t.Errorf("shutdown_grace 1m30s: terminationGracePeriodSeconds %d, want 110", *d.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
	// The bearer token is a file from the referenced Secret, never a value.
	if cfg.Web.Auth.BearerToken != "" || secretOf(t, pod, c, cfg.Web.Auth.BearerTokenFile) != "autocapture-auth/bearer_token" {
		t.Errorf("web.auth: %+v, want bearer_token_file from autocapture-auth", cfg.Web.Auth)
	}
	if svc := objs.services[helmRelease]; svc == nil || !strings.HasPrefix(cfg.Web.ExternalURL, "http://"+svc.Name+"."+helmNamespace+".svc:") {
		t.Errorf("external_url %q is not the Service's URL", cfg.Web.ExternalURL)
	}
}

// checkRestricted: the restricted Pod Security profile.
func checkRestricted(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want non-root 65532 and seccomp RuntimeDefault", psc)
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || csc.AllowPrivilegeEscalation == nil ||
		*csc.AllowPrivilegeEscalation || csc.Capabilities == nil || len(csc.Capabilities.Drop) != 1 || csc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container securityContext %+v: want a read-only root, no escalation, ALL dropped", csc)
	}
	for _, p := range []string{"/tmp", "/var/lib/autocapture"} {
		if v, _, _ := mountedAt(pod, c, p); v == nil {
			t.Errorf("%s is not a volume: the root filesystem is read-only", p)
		}
	}
}

// secretOf names the Secret and key a file in the container comes from:
// "secret/key", or "" when it is no Secret's.
func secretOf(t *testing.T, pod corev1.PodSpec, c corev1.Container, path string) string {
	t.Helper()
	vol, m, file := mountedAt(pod, c, path)
	if vol == nil || !m.ReadOnly {
		return ""
	}
	var sources []corev1.VolumeProjection
	if vol.Projected != nil {
		sources = vol.Projected.Sources
	} else if vol.Secret != nil {
		sources = []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: vol.Secret.SecretName}, Items: vol.Secret.Items}}}
	}
	for _, s := range sources {
		if s.Secret == nil {
			continue
		}
		for _, it := range s.Secret.Items {
			if it.Path == file {
				return s.Secret.Name + "/" + it.Key
			}
		}
	}
	return ""
}

// TestHelmPostgreSQL: more replicas run on the referenced PostgreSQL, roll
// with maxUnavailable 0, and get a PDB and a spread selecting their pods.
func TestHelmPostgreSQL(t *testing.T) {
	parallel(t)
	objs := renderChart(t, []string{valuesFile(t, haValues)})
	dep, c, cfg := chartDaemon(t, objs)
	pod := dep.Spec.Template.Spec
	ru := dep.Spec.Strategy.RollingUpdate
	if *dep.Spec.Replicas != 3 || ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() < 1 {
		t.Errorf("replicas %d, rolling update %+v: want 3, maxUnavailable 0 (a replica always takes webhooks)", *dep.Spec.Replicas, ru)
	}
	if got := secretOf(t, pod, c, cfg.Database.URLFile); cfg.Database.URLFile == "" || got != "pg/dsn" {
		t.Errorf("database.url_file %q from %q, want the Secret pg key dsn", cfg.Database.URLFile, got)
	}
	if got := secretOf(t, pod, c, cfg.Storage.S3.SecretAccessKeyFile); got != "s3keys/s3_secret_access_key" {
		t.Errorf("storage.s3.secret_access_key_file from %q", got)
	}
	if v, _, _ := mountedAt(pod, c, cfg.Storage.Path); v == nil || v.EmptyDir == nil || len(objs.pvcs) != 0 {
		t.Errorf("storage.path on %v with %d claims: several replicas share no ReadWriteOnce claim", v, len(objs.pvcs))
	}
	pdb := objs.pdbs[helmRelease]
	tmpl := dep.Spec.Template.Labels
	if pdb == nil || !selects(t, pdb.Spec.Selector, tmpl) || pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(2) {
		t.Errorf("PDB %+v: want minAvailable 2 selecting the pods", pdb)
	}
	if len(pod.TopologySpreadConstraints) != 1 || !selects(t, pod.TopologySpreadConstraints[0].LabelSelector, tmpl) {
		t.Errorf("topology spread %+v: want one selecting the pods", pod.TopologySpreadConstraints)
	}
}

// TestHelmRefusesBadValues: the schema names a wrong type's or an unknown
// key's path, and the chart refuses replicas without a shared store.
func TestHelmRefusesBadValues(t *testing.T) {
	parallel(t)
	for _, tc := range []struct{ values, want string }{
		{"replicaCount: three\n", "/replicaCount"},
		{"persistence: {sizee: 1Gi}\n", "sizee"},
		{"servicemonitor: {enabled: true}\n", "servicemonitor"},
		{"agent: {networkPolicy: {port: \"9101\"}}\n", "/agent/networkPolicy/port"},
		{"replicaCount: 2\n", "database.existingSecret"},
		{"replicaCount: 2\ndatabase: {existingSecret: pg}\n", "storage.backend: s3"},
		{"auth: {existingSecret: \"\"}\n", "auth.existingSecret"},
	} {
		_, err := helmTemplate(t, []string{valuesFile(t, tc.values)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: error %v, want one naming %s", tc.values, err, tc.want)
		}
	}
	// The invalid example a user might write first: every problem named at once.
	_, err := helmTemplate(t, []string{filepath.Join("..", "e2e", "deploy", "testdata", "invalid-values.yaml")})
	for _, key := range []string{"/image/pullPolicy", "/service/port", "replicas"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("invalid-values.yaml: error %v does not name %s", err, key)
		}
	}
}
