// Package exposition reads a serving engine's Prometheus exposition (its
// /metrics page): the parsed families (Exposition), their values, series and
// histograms, and vLLM's metric names of both generations (Metric, VM*). The
// parsing is engine-neutral: the scrape step reads SGLang's page with it too,
// by the names in capture/internal/sglangexpo. The profile step reads the
// waiting queue.
package exposition
