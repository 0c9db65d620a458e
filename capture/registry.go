package capture

import (
	"fmt"
	"sort"
	"sync"

	"github.com/autocapture/autocapture/vocab"
)

var (
	mu    sync.RWMutex
	kinds = map[string]vocab.Kind{}
)

// Register adds a kind to the one registry table. Each kind file calls it from init;
// tests may register their own. A duplicate name panics, as in Caddy's module table.
func Register(k vocab.Kind) {
	if k.Name == "" || k.Config == nil || k.Build == nil {
		panic(fmt.Sprintf("capture: incomplete kind %q", k.Name))
	}
	if k.Tier == 0 {
		panic(fmt.Sprintf("capture: kind %q has no tier", k.Name))
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := kinds[k.Name]; dup {
		panic(fmt.Sprintf("capture: kind %q registered twice", k.Name))
	}
	kinds[k.Name] = k
}

// Lookup returns the kind registered under name.
func Lookup(name string) (vocab.Kind, bool) {
	mu.RLock()
	defer mu.RUnlock()
	k, ok := kinds[name]
	return k, ok
}

// Kinds returns every registered kind name, sorted.
func Kinds() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
