// Package sglang holds the shipped SGLang playbooks, embedded in the binary
// beside playbooks/vllm's: the same alerts, evidence and verdicts, in SGLang's
// metric dialect (capture/README.md, Engine dialects).
package sglang

import "embed"

// FS holds the shipped playbook files (only they: not this package's Go files).
//
//go:embed *.yaml
var FS embed.FS
