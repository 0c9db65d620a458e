// Package vllm holds the shipped vLLM playbooks, embedded in the binary: the
// config's playbook files are layered over them unless shipped_playbooks is
// false (playbooks.Sources).
package vllm

import "embed"

// FS holds the shipped playbook files (only they: not this package's Go files).
//
//go:embed *.yaml
var FS embed.FS
