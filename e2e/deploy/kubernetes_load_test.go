package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kubeDir is the Kustomize base, relative to this package.
const kubeDir = "kubernetes"

// kubeKinds are the types a manifest here may be, by apiVersion and kind.
// Anything else is an error: a typo in either is caught too.
var kubeKinds = map[string]func() any{
	"apps/v1/Deployment":                            func() any { return &appsv1.Deployment{} },
	"v1/Service":                                    func() any { return &corev1.Service{} },
	"v1/ConfigMap":                                  func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                                     func() any { return &corev1.Secret{} },
	"networking.k8s.io/v1/NetworkPolicy":            func() any { return &networkingv1.NetworkPolicy{} },
	"policy/v1/PodDisruptionBudget":                 func() any { return &policyv1.PodDisruptionBudget{} },
	"v1/PersistentVolumeClaim":                      func() any { return &corev1.PersistentVolumeClaim{} },
	"monitoring.coreos.com/v1/ServiceMonitor":       func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule":       func() any { return &monitoringv1.PrometheusRule{} },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return &kusttypes.Kustomization{} },
	"kustomize.config.k8s.io/v1alpha1/Component":    func() any { return &kusttypes.Kustomization{} },
}

// decodeStrict decodes one YAML document into its k8s.io/api (or
// Kustomize) type, failing on an unknown or duplicate field.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	mk, ok := kubeKinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a type these manifests may use", tm.APIVersion, tm.Kind)
	}
	obj := mk()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// yamlDocs splits a multi-document YAML stream, leaving out documents with
// nothing but comments.
func yamlDocs(b []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var docs [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(d, &v); err != nil {
			return nil, err
		}
		if v != nil {
			docs = append(docs, d)
		}
	}
}

// decodeFile decodes every document of a manifest file strictly.
func decodeFile(t *testing.T, path string) []any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := yamlDocs(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []any
	for i, d := range docs {
		obj, err := decodeStrict(d)
		if err != nil {
			t.Errorf("%s: document %d: %v", path, i+1, err)
			continue
		}
		out = append(out, obj)
	}
	return out
}

// kubeObjects are the resources of one rendering, by type.
type kubeObjects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	policies    map[string]*networkingv1.NetworkPolicy
	pdbs        map[string]*policyv1.PodDisruptionBudget
	pvcs        map[string]*corev1.PersistentVolumeClaim
	monitors    map[string]*monitoringv1.ServiceMonitor
	rules       map[string]*monitoringv1.PrometheusRule
}

func (k *kubeObjects) add(t *testing.T, obj any) {
	t.Helper()
	if k.deployments == nil {
		*k = kubeObjects{map[string]*appsv1.Deployment{}, map[string]*corev1.Service{}, map[string]*corev1.ConfigMap{},
			map[string]*corev1.Secret{}, map[string]*networkingv1.NetworkPolicy{}, map[string]*policyv1.PodDisruptionBudget{},
			map[string]*corev1.PersistentVolumeClaim{}, map[string]*monitoringv1.ServiceMonitor{}, map[string]*monitoringv1.PrometheusRule{}}
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		k.deployments[o.Name] = o
	case *corev1.Service:
		k.services[o.Name] = o
	case *corev1.ConfigMap:
		k.configMaps[o.Name] = o
	case *corev1.Secret:
		k.secrets[o.Name] = o
	case *networkingv1.NetworkPolicy:
		k.policies[o.Name] = o
	case *policyv1.PodDisruptionBudget:
		k.pdbs[o.Name] = o
	case *corev1.PersistentVolumeClaim:
		k.pvcs[o.Name] = o
	case *monitoringv1.ServiceMonitor:
		k.monitors[o.Name] = o
	case *monitoringv1.PrometheusRule:
		k.rules[o.Name] = o
	default:
		t.Errorf("rendered a %T", obj)
	}
}

// render runs kustomize (krusty, what kubectl apply -k embeds) on dir and
// decodes every resource it emits strictly.
func render(t *testing.T, dir string) kubeObjects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := yamlDocs(b)
	if err != nil {
		t.Fatal(err)
	}
	var out kubeObjects
	for _, d := range docs {
		obj, err := decodeStrict(d)
		if err != nil {
			t.Fatalf("kustomize build %s: %v\n%s", dir, err, d)
		}
		out.add(t, obj)
	}
	return out
}

// selects says whether a label selector picks pods with these labels.
func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// configMapByPrefix finds a generated ConfigMap (name-hash) by its base name.
func (k kubeObjects) configMapByPrefix(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	for n, cm := range k.configMaps {
		if n == name || strings.HasPrefix(n, name+"-") {
			return cm
		}
	}
	t.Fatalf("no ConfigMap %s rendered", name)
	return nil
}

// mountedAt resolves a file path in a container to its volume: the volume,
// the mount, and the file's name inside the volume ("" for the mount itself).
func mountedAt(pod corev1.PodSpec, c corev1.Container, path string) (*corev1.Volume, *corev1.VolumeMount, string) {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			if best == nil || len(m.MountPath) > len(best.MountPath) {
				best = &c.VolumeMounts[i]
			}
		}
	}
	if best == nil {
		return nil, nil, ""
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(path, best.MountPath), "/")
	if best.SubPath != "" {
		rest = filepath.Join(best.SubPath, rest)
	}
	for i, v := range pod.Volumes {
		if v.Name == best.Name {
			return &pod.Volumes[i], best, rest
		}
	}
	return nil, best, rest
}
