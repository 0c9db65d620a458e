// Package vllmexpo reads a vLLM server's Prometheus exposition (its /metrics
// page): the parsed families (Exposition), their values and histograms, and
// vLLM's metric names of both generations (Metric, VM*). The scrape step
// computes its signals from it; the profile step reads the waiting queue.
package vllmexpo
