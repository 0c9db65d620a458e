package playbooks

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/alertmanager/matcher/parse"
	"github.com/prometheus/common/model"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// matcherTable is shared by our Match and amtool's routing: every matcher is a
// route's matchers: entry.
var matcherTable = []string{
	`alertname="VLLMHighTTFT"`,
	`alertname!="VLLMHighTTFT"`,
	`severity=~"page|critical"`,
	`severity!~"page|critical"`,
	`instance=~"127\\.0\\.0\\.1:.*"`,
	`model_name=""`,
	`model_name!=""`,
	`alertname=~"VLLM.*"`,
	`alertname=~"vllm.*"`,
	`alertname=VLLMQueueDeep`,
	`severity=~".*"`,
	`severity=~".+"`,
	`{alertname="VLLMHighITL", severity="page"}`,
}

var labelSets = []map[string]string{
	{"alertname": "VLLMHighTTFT", "severity": "page", "instance": "127.0.0.1:8000", "model_name": "m"},
	{"alertname": "VLLMHighTTFT", "severity": "pager"},
	{"alertname": "VLLMQueueDeep", "severity": "critical", "instance": "10.0.0.1:8000"},
	{"alertname": "VLLMHighITL", "severity": "page", "model_name": ""},
	{"alertname": "NodeDown"},
	{"alertname": "vllmlower", "severity": ""},
}

// TestMatchersAgreeWithAmtool routes each label set through `amtool config routes
// test` (Alertmanager's own routing, the Debian 0.25 build) with one continue:
// true route per matcher, and compares the receivers it names with our Match.
func TestMatchersAgreeWithAmtool(t *testing.T) {
	amtool := testenv.Tool(t, "amtool")
	cfg := "route:\n  receiver: none\n  routes:\n"
	recv := "receivers:\n  - name: none\n"
	for i, m := range matcherTable {
		cfg += fmt.Sprintf("    - receiver: m%d\n      continue: true\n      matchers: [%q]\n", i, m)
		recv += fmt.Sprintf("  - name: m%d\n", i)
	}
	path := filepath.Join(t.TempDir(), "am.yml")
	if err := os.WriteFile(path, []byte(cfg+recv), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, ls := range labelSets {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			args := []string{"config", "routes", "test", "--config.file=" + path}
			set := model.LabelSet{}
			keys := make([]string, 0, len(ls))
			for k := range ls {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				args = append(args, fmt.Sprintf("%s=%q", k, ls[k]))
				set[model.LabelName(k)] = model.LabelValue(ls[k])
			}
			out, err := exec.Command(amtool, args...).Output() // stderr carries a warning about --alertmanager.url
			if err != nil {
				t.Fatalf("amtool %v: %v\n%s", args, err, out)
			}
			var want []string
			for _, r := range strings.Split(strings.TrimSpace(string(out)), ",") {
				if r != "none" {
					want = append(want, r)
				}
			}
			var got []string
			for j, src := range matcherTable {
				ms, err := parse.Matchers(src)
				if err != nil {
					t.Fatalf("parse %s: %v", src, err)
				}
				if ms.Matches(set) {
					got = append(got, fmt.Sprintf("m%d", j))
				}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("labels %v: we match %v, amtool routes to %v (table: %q)", ls, got, want, matcherTable)
			}
		})
	}
}
