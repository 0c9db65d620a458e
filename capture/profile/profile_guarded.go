package profile

import (
	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/vocab"
)

// Guarded is what a capture of this step for alert asks the profiling guard
// for (its target and cooldown), so that a caller can ask the guard before
// running the step ("Profile again"); Run asks the same.
func (p *Profile) Guarded(alert template.Alert) (vocab.LeaseRequest, error) {
	target, err := p.target(&vocab.Input{Alert: alert})
	if err != nil {
		return vocab.LeaseRequest{}, err
	}
	return vocab.LeaseRequest{Target: target, Cooldown: p.cfg.Cooldown}, nil
}
