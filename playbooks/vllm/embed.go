// Package vllm holds the shipped vLLM playbooks, embedded in the binary: with no
// playbooks: globs in the config they are the active set (playbooks.Load).
package vllm

import "embed"

// FS holds the shipped playbook files (only they: not this package's Go files).
//
//go:embed *.yaml
var FS embed.FS
