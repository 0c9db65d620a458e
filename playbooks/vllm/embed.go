// Package vllm holds the shipped vLLM playbooks, embedded in the binary: with no
// playbooks: globs in the config they are the active set (playbooks.Load).
package vllm

import "embed"

// FS holds the shipped playbook files; playbooks.LoadFS reads its *.yaml files.
//
// The pattern is * rather than *.yaml so the package builds while the directory
// holds no playbook yet (an embed pattern must match a file); LoadFS only reads
// the *.yaml entries.
//
//go:embed *
var FS embed.FS
