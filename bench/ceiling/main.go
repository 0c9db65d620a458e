// Command ceiling is the framework's ceiling for the webhook benchmark: a
// net/http server that decodes the same webhook JSON with the daemon's own
// decoder (handlers.Decode) and stores nothing. bench/run.sh drives it next
// to the real daemon.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/autocapture/autocapture/handlers"
)

func main() {
	addr := flag.String("web.listen-address", "127.0.0.1:9096", "address to listen on")
	flag.Parse()
	m := http.NewServeMux()
	m.HandleFunc("POST /hooks/alertmanager", decodeOnly)
	m.HandleFunc("GET /-/healthy", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	if err := http.ListenAndServe(*addr, m); err != nil {
		fmt.Fprintln(os.Stderr, "ceiling:", err)
		os.Exit(1)
	}
}

// decodeOnly reads and decodes the body, then answers with the alert count.
func decodeOnly(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		answer(w, http.StatusRequestEntityTooLarge, map[string]any{"error": err.Error()})
		return
	}
	p, err := handlers.Decode(body)
	if err != nil {
		answer(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	answer(w, http.StatusOK, map[string]any{"status": "ok", "alerts": len(p.Message.Alerts)})
}

// answer writes v as JSON, as the daemon does.
func answer(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v) // maps of strings and ints always encode
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
