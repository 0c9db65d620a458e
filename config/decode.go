package config

import (
	"os"
	"reflect"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

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

// Partial decodes what a config file says well, for a caller that goes on
// past the file's errors (check reports the playbooks it names): values
// refused keep their defaults and refused lists their key paths. Secrets'
// _file twins are not read and nothing is validated. Nil when the file
// cannot be read or is not one YAML document.
func Partial(path string) (cfg *Config, refused []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil || len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, nil
	}
	c := Default()
	_, refused = decode(path, f, &c)
	return &c, refused
}
