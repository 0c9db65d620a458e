package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"

	"github.com/autocapture/autocapture/internal/yamlerr"
)

// TestDecodeErrorsSayWhatIsWanted: a value of the wrong type is refused at its
// file:line:col, naming its key path, what is wanted with an example and what
// the file holds instead; an unknown key gets the closest known key of its
// level. Before, these spoke Go ("cannot unmarshal string into Go struct field
// Config.Runs of type int"), a duration error had no position, and an unknown
// key had no suggestion. Each case is the whole error: one problem, no other.
func TestDecodeErrorsSayWhatIsWanted(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"integer", "runs:\n  max_concurrent: four\n",
			`c.yaml:2:19: runs.max_concurrent: want an integer, e.g. 4, got "four"`},
		{"integer out of range", "runs:\n  max_attempts: 99999999999999999999999\n",
			`c.yaml:2:17: runs.max_attempts: want an integer, e.g. 3, got "99999999999999999999999" (out of range)`},
		{"duration with a space", "runs:\n  lease_timeout: 20 s\n",
			`c.yaml:2:18: runs.lease_timeout: want a duration such as 20s, 500ms or 1m30s, got "20 s"`},
		{"duration without a unit", "runs:\n  lease_timeout: 20\n",
			`c.yaml:2:18: runs.lease_timeout: want a duration such as 20s, 500ms or 1m30s, got 20 (a number without a unit)`},
		{"bool", "web:\n  allow_unauthenticated: yes\n",
			`c.yaml:2:26: web.allow_unauthenticated: want true or false, got "yes"`},
		{"number", "notify:\n  slack:\n    pace: {per_second: fast}\n",
			`c.yaml:3:24: notify.slack.pace.per_second: want a number, e.g. 1, got "fast"`},
		{"string", "storage:\n  compression: [zstd]\n",
			`c.yaml:2:16: storage.compression: want a string, e.g. "gzip", got a list`},
		{"list", "targets:\n  allow: localhost\n",
			`c.yaml:2:10: targets.allow: want a list, e.g. [127.0.0.0/8, ::1/128, localhost], got a string`},
		{"list item", "playbooks: [a.yaml, {b: 1}]\n",
			`c.yaml:1:21: playbooks[1]: want a string, got a mapping`},
		{"mapping", "notify: slack\n",
			`c.yaml:1:9: notify: want a mapping (keys console, slack, storm), got a string`},
		{"mapping behind a pointer", "web:\n  auth:\n    basic_auth: am\n",
			`c.yaml:3:17: web.auth.basic_auth: want a mapping (keys username, password, password_file), got a string`},
		// A string where a block belongs is never quoted: the block may
		// hold secrets, and a user who flattened it wrote them here.
		{"a block's secrets are never shown: database", "database: postgres://u:hunter2@db/ac\n",
			`c.yaml:1:11: database: want a mapping (keys url, url_file, startup_wait), got a string`},
		{"a block's secrets are never shown: basic_auth", "web:\n  auth:\n    basic_auth: admin:hunter2\n",
			`c.yaml:3:17: web.auth.basic_auth: want a mapping (keys username, password, password_file), got a string`},
		{"a block's secrets are never shown: slack", "notify:\n  slack: xoxb-hunter2\n",
			`c.yaml:2:10: notify.slack: want a mapping (keys enabled, token, token_file, api_url, …), got a string`},
		{"mapping at the top", "- web\n",
			`c.yaml:1:1: the config: want a mapping (keys web, storage, database, runs, …), got a list`},
		{"a secret is never shown", "notify:\n  slack:\n    token: [xoxb-canary]\n",
			`c.yaml:3:12: notify.slack.token: want a string, got a list`},
		{"type with its own words", "retention:\n  runs: [30d]\n",
			`c.yaml:2:9: retention.runs: want a duration such as 30d, 2w or 720h (0 keeps for ever), got a list`},
		{"alias decodes as its anchor", "web:\n  link_ttl: &ttl 1h\nruns:\n  lookback: *ttl\n  replica: [a]\n",
			`c.yaml:5:12: runs.replica: want a string, got a list`},
		{"unknown key", "runs:\n  lease_timout: 20s\n",
			`c.yaml:2:3: unknown field "lease_timout" in runs: did you mean "lease_timeout"?`},
		{"unknown key, letters swapped", "notify:\n  slack:\n    chanenl: C1\n",
			`c.yaml:3:5: unknown field "chanenl" in notify.slack: did you mean "channel"?`},
		{"unknown key, case and dash", "storage:\n  s3:\n    Path-Style: true\n",
			`c.yaml:3:5: unknown field "Path-Style" in storage.s3: did you mean "path_style"?`},
		{"unknown key at the top", "wbe:\n  listen_address: 127.0.0.1:1\n",
			`c.yaml:1:1: unknown field "wbe" at the top level: did you mean "web"?`},
		{"unknown key, nothing close", "log:\n  colour: red\n",
			`c.yaml:2:3: unknown field "colour" in log: want one of level, format`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("loaded, want %s", c.want)
			}
			if err.Error() != c.want {
				t.Fatalf("err\n got %s\nwant %s", err, c.want)
			}
		})
	}
}

// TestEveryProblemAtOnceInFileOrder: a type error, an unknown key and a
// validation error are all reported, in the order of the file, though the
// validation error comes first and the decode errors after it. Before, only
// the first decode error was shown and the validator never ran.
func TestEveryProblemAtOnceInFileOrder(t *testing.T) {
	y := "log:\n  level: loud\nruns:\n  max_concurrent: four\n  lease_timout: 20s\n"
	_, err := Parse("c.yaml", []byte(y))
	want := strings.Join([]string{
		`c.yaml:2:10: log.level: want debug, info, warn or error, got "loud"`,
		`c.yaml:4:19: runs.max_concurrent: want an integer, e.g. 4, got "four"`,
		`c.yaml:5:3: unknown field "lease_timout" in runs: did you mean "lease_timeout"?`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("err\n got %v\nwant %s", err, want)
	}
	var list yamlerr.List
	if !errors.As(err, &list) || len(list) != 3 {
		t.Fatalf("err is %T, want a yamlerr.List of 3", err)
	}
}

// TestRefusedValueIsNotAlsoValidated: a refused value keeps its default, and
// the validator does not report that default as if the file said it; the
// values around it are still checked.
func TestRefusedValueIsNotAlsoValidated(t *testing.T) {
	y := "targets:\n  allow: [localhost, {host: a}, 10.0.0.0/99]\n"
	_, err := Parse("c.yaml", []byte(y))
	want := "c.yaml:2:22: targets.allow[1]: want a string, got a mapping\n" +
		`c.yaml:2:33: targets.allow[2]: bad CIDR "10.0.0.0/99": netip.ParsePrefix("10.0.0.0/99"): prefix length out of range`
	if err == nil || err.Error() != want {
		t.Fatalf("err\n got %v\nwant %s", err, want)
	}
}

// TestEveryKeySuggestsItself: each key of the config, misspelt (two letters
// swapped, or one dropped), is suggested back at its own level: the known keys
// come from the structs' yaml tags, so a new field is suggested without a list
// to keep. The test reads the tags itself.
func TestEveryKeySuggestsItself(t *testing.T) {
	n := 0
	var walk func(t reflect.Type, path []string)
	walk = func(typ reflect.Type, path []string) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() {
			return
		}
		for i := 0; i < typ.NumField(); i++ {
			key, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
			typo := key[:len(key)-1] // dropped its last letter
			for m := len(key) / 2; len(key) > 3 && m+1 < len(key); m++ {
				if key[m] != key[m+1] {
					typo = key[:m] + key[m+1:m+2] + key[m:m+1] + key[m+2:] // swapped two
					break
				}
			}
			y := ""
			for d, p := range path {
				y += strings.Repeat("  ", d) + p + ":\n"
			}
			y += strings.Repeat("  ", len(path)) + typo + ": x\n"
			_, err := Parse("c.yaml", []byte(y))
			if want := `did you mean "` + key + `"?`; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s (%s): err = %v, want %s", strings.Join(append(path, key), "."), typo, err, want)
			}
			n++
			walk(typ.Field(i).Type, append(path[:len(path):len(path)], key))
		}
	}
	walk(reflect.TypeFor[Config](), nil)
	if n < 100 {
		t.Fatalf("%d keys tried; the walk missed sections", n)
	}
}

// TestKeyByKeyDecodeMatchesWholeDecode: the decode that runs after go-yaml
// refuses a file (so the validator sees the values that are well typed) gives,
// on files go-yaml accepts, the config go-yaml gives: defaults kept, lists
// replaced, pointers filled, anchors, aliases and merges followed.
func TestKeyByKeyDecodeMatchesWholeDecode(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, y := range map[string]string{
		"example": string(example),
		"full": "web:\n  listen_address: 0.0.0.0:1\n  auth:\n    basic_auth: {username: u, password: p}\n  link_ttl: 1h\n" +
			"storage:\n  backend: s3\n  compression: zstd\n  s3: {bucket: b, part_size: 16777216, path_style: true}\n" +
			"retention: {runs: 30d}\nplaybooks: [a.yaml, b/*.yaml]\ntargets:\n  allow: [10.0.0.0/8]\n" +
			"notify:\n  slack: {enabled: true, token: t, channel: C1, pace: {per_second: 0.5}}\n  console: {enabled: false}\n",
		"anchors": "runs: &r {max_concurrent: 2, lookback: 1m}\nprofiling:\n  <<: {max_per_hour: 2}\n  max_duration: &d 10s\n" +
			"  stop_timeout: *d\n",
		"nulls": "web:\nruns:\n  max_concurrent:\ntargets:\n  allow:\n",
	} {
		t.Run(name, func(t *testing.T) {
			f, err := parser.ParseBytes([]byte(y), 0)
			if err != nil {
				t.Fatal(err)
			}
			whole := Default()
			if err := yaml.NodeToValue(f.Docs[0].Body, &whole, yaml.Strict()); err != nil {
				t.Fatal(err)
			}
			byKey := Default()
			errs, _ := yamlerr.Walk(f.Docs[0].Body, &byKey, yamlerr.Options{File: "c.yaml", AST: f, Root: "the config"})
			if errs.Err() != nil {
				t.Fatalf("key by key refused a file go-yaml accepts: %v", errs)
			}
			if !reflect.DeepEqual(whole, byKey) {
				t.Fatalf("key by key\n %+v\nwhole\n %+v", byKey, whole)
			}
		})
	}
}
