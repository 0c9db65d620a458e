package stepkit

import (
	"net/http"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/autocapture/autocapture/vocab"
)

// HTTPClientOf is the endpoint's client, or one bounded by its Timeout.
func HTTPClientOf(e *vocab.Endpoint) *http.Client {
	if e.Client != nil {
		return e.Client
	}
	return &http.Client{Timeout: e.Timeout}
}

// PromAPIOf is the Prometheus HTTP API of a configured Prometheus.
func PromAPIOf(e *vocab.Endpoint) (v1.API, error) {
	c, err := api.NewClient(api.Config{Address: e.URL, Client: HTTPClientOf(e)})
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "prometheus %s: %w", RedactURL(e.URL), err)
	}
	return v1.NewAPI(c), nil
}
