package playbooks

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/vocab"
)

// SchemaID is the $id of the playbook file schema.
const SchemaID = "https://github.com/autocapture/autocapture/playbooks/schema.json"

// Schema returns the JSON Schema of playbook files, generated from FileSpec and
// every registered kind's Config(): editors validate and complete with it
// (# yaml-language-server: $schema=…). playbooks/schema.json is its committed copy.
func Schema() ([]byte, error) {
	r := reflector()
	root := r.Reflect(&FileSpec{})
	root.ID = SchemaID
	root.Title = "autocapture playbook file"
	pb := root.Properties.Value("playbooks").Items
	root.Definitions = jsonschema.Definitions{"step": stepSchema(r)}
	step := &jsonschema.Schema{Ref: "#/$defs/step"}
	pb.Properties.Set("steps", &jsonschema.Schema{Type: "array", MinItems: ptr(uint64(1)),
		Items: &jsonschema.Schema{AnyOf: []*jsonschema.Schema{step, useSchema(r)}}})
	pb.Properties.Set("vars", varsSchema("Templated once per run, in order; visible as {{ .Vars.name }}."))
	ps := root.Properties.Value("presets").Items
	ps.Properties.Set("steps", &jsonschema.Schema{Type: "array", MinItems: ptr(uint64(1)), Items: step,
		Description: "Plain steps (no use:), copied into each playbook that uses the preset."})
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("playbooks: schema: %w", err)
	}
	return append(b, '\n'), nil
}

func reflector() *jsonschema.Reflector {
	return &jsonschema.Reflector{
		FieldNameTag:               "yaml",
		DoNotReference:             true,
		RequiredFromJSONSchemaTags: true,
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			switch t {
			case reflect.TypeFor[time.Duration]():
				return &jsonschema.Schema{Type: "string", Pattern: `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`,
					Description: "A Go duration: 500ms, 20s, 2m, 1h30m."}
			case reflect.TypeFor[vocab.Tier]():
				return tierSchema()
			case reflect.TypeFor[time.Time]():
				return &jsonschema.Schema{Type: "string", Format: "date-time"}
			}
			return nil
		},
	}
}

// stepSchema is StepSpec plus one optional property per registered kind, exactly
// one of which must be present.
func stepSchema(r *jsonschema.Reflector) *jsonschema.Schema {
	s := r.Reflect(&StepSpec{})
	s.Version, s.ID = "", ""
	s.Properties.Set("tier", tierSchema())
	for _, name := range capture.Kinds() {
		k, _ := capture.Lookup(name)
		ks := r.Reflect(k.Config())
		ks.Version, ks.ID = "", ""
		ks.Description = k.Doc
		if ks.Type == "object" {
			ks.Type = ""
			ks.AnyOf = []*jsonschema.Schema{{Type: "object"}, {Type: "null"}}
		}
		s.Properties.Set(name, ks)
		s.OneOf = append(s.OneOf, &jsonschema.Schema{Required: []string{name}})
	}
	return s
}

// useSchema is a playbook step that includes a preset: use: plus optional with: vars.
func useSchema(r *jsonschema.Reflector) *jsonschema.Schema {
	s := r.Reflect(&UseSpec{})
	s.Version, s.ID = "", ""
	s.Properties.Set("with", varsSchema("Vars the preset's steps see on top of the playbook's, templated once per run, in order."))
	return s
}

func varsSchema(doc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Description: doc, AdditionalProperties: &jsonschema.Schema{Type: "string"}}
}

func tierSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Description: "1 (metrics), triage, 2 (traces) or 3 (profile); default from the kind.",
		Enum: []any{"1", "triage", "2", "3", 1, 2, 3}}
}

func ptr[T any](v T) *T { return &v }
