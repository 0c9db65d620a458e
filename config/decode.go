package config

import (
	"reflect"

	"github.com/goccy/go-yaml/ast"

	"github.com/autocapture/autocapture/internal/yamlerr"
)

// decode decodes the document body over cfg (Default) with the decoder the
// playbooks share (yamlerr.Decode): one bad value hides no other, each error
// names its key path and what is wanted, an unknown key gets the closest
// known key of its level, and the values that are well typed are decoded so
// the validator still checks them. bad holds the key paths refused. Secrets
// are never quoted back.
func decode(file string, f *ast.File, cfg *Config) (errs yamlerr.List, bad []string) {
	return yamlerr.Decode(f.Docs[0].Body, cfg, yamlerr.Options{
		File: file, AST: f, Root: "the config",
		Reset:   func() { *cfg = Default() },
		Secrets: []reflect.Type{reflect.TypeFor[Secret]()},
	})
}
