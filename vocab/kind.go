package vocab

// Kind describes one step kind (capture.Register takes it): its name in
// playbooks, its default tier, the config it decodes, and how a step is
// built from that config.
type Kind struct {
	Name string
	// Tier is where steps of this kind run unless the playbook says otherwise.
	Tier Tier
	// Doc is one sentence for `check`, the JSON schema and the README.
	Doc string
	// Config returns a pointer to a zero config; playbooks decode the step's YAML
	// (templates already rendered) into it strictly. It also drives the JSON schema.
	Config func() any
	// Build validates a decoded config and returns the step. It must not do I/O.
	Build func(cfg any) (Step, error)
	// Cooldown says the kind accepts a step-level `cooldown`.
	Cooldown bool
}
