package deploy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// composeFile is the compose topology, relative to this package.
const composeFile = "compose/compose.yaml"

// loadComposeFile loads path with compose-go as `docker compose config`
// does: schema validation (unknown fields are errors), interpolation with an
// empty environment (a ${VAR} the file relies on would show), consistency
// checks (every secret, volume and service a service names is declared),
// paths resolved against the file's folder.
func loadComposeFile(t *testing.T, path string) (*types.Project, error) {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		t.Fatal(err)
	}
	details := types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs, Content: data}},
		Environment: types.Mapping{},
	}
	return loader.LoadWithContext(context.Background(), details, func(o *loader.Options) {
		o.SetProjectName("autocapture", true)
		o.ResolvePaths = true
	})
}

// loadCompose loads the shipped compose file and fails the test on any error.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	p, err := loadComposeFile(t, composeFile)
	if err != nil {
		t.Fatalf("compose-go: %v", err)
	}
	return p
}

// service returns the named service or fails the test.
func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("compose: no service %q", name)
	}
	return s
}

// mountedFiles maps each container path a service reads from the repo (a
// bind mount or a file secret) to the file's absolute path here.
func mountedFiles(t *testing.T, p *types.Project, s types.ServiceConfig) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind {
			m[v.Target] = v.Source
		}
	}
	for _, sec := range s.Secrets {
		decl, ok := p.Secrets[sec.Source]
		if !ok || decl.File == "" {
			t.Fatalf("compose: %s: secret %q is not a file secret", s.Name, sec.Source)
		}
		target := sec.Target
		if target == "" {
			target = "/run/secrets/" + sec.Source
		}
		m[target] = decl.File
	}
	return m
}

// secretTarget is where service s sees secret name, "" when it does not.
func secretTarget(s types.ServiceConfig, name string) string {
	for _, sec := range s.Secrets {
		if sec.Source == name {
			if sec.Target == "" {
				return "/run/secrets/" + name
			}
			return sec.Target
		}
	}
	return ""
}

// secretAt is the name of the secret service s sees at path, "" if none.
func secretAt(s types.ServiceConfig, path string) string {
	for _, sec := range s.Secrets {
		if secretTarget(s, sec.Source) == path {
			return sec.Source
		}
	}
	return ""
}

// namedVolumeAt is the named volume service s mounts at target, "" if none.
func namedVolumeAt(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Target == target {
			return v.Source
		}
	}
	return ""
}

// flagValue is the value of --name=value in args ("" and false if absent).
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// exposed is the ports service s lists under expose.
func exposed(s types.ServiceConfig) []string {
	return slices.Clone([]string(s.Expose))
}

// port is the port of a host:port (fails the test otherwise).
func port(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("%q: %v", hostport, err)
	}
	return p
}
