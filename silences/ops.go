package silences

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-openapi/strfmt"
	amclient "github.com/prometheus/alertmanager/api/v2/client"
	"github.com/prometheus/alertmanager/api/v2/client/silence"
	"github.com/prometheus/alertmanager/api/v2/models"
)

// Ensure returns the id of a silence that says s: one not yet expired with
// the same matchers and comment if Alertmanager holds it (an earlier attempt
// made it, then died before recording its id), else a new one. created says
// which.
func (c *Client) Ensure(ctx context.Context, s Silence) (id string, created bool, err error) {
	if f, ok, err := c.find(ctx, s); err != nil {
		return "", false, err
	} else if ok {
		return f.ID, false, nil
	}
	now := strfmt.DateTime(time.Now())
	ends := strfmt.DateTime(s.EndsAt)
	body := &models.PostableSilence{Silence: models.Silence{Matchers: toModel(s.Matchers), StartsAt: &now, EndsAt: &ends,
		CreatedBy: &s.CreatedBy, Comment: &s.Comment}}
	err = c.each(ctx, "create a silence", func(ctx context.Context, api *amclient.AlertmanagerAPI) error {
		ok, err := api.Silence.PostSilences(silence.NewPostSilencesParamsWithContext(ctx).WithSilence(body))
		if err == nil {
			id = ok.Payload.SilenceID
		}
		return err
	})
	return id, err == nil, err
}

// find looks for a silence not yet expired with s's matchers and comment.
func (c *Client) find(ctx context.Context, s Silence) (Found, bool, error) {
	filter := make([]string, 0, len(s.Matchers))
	for _, m := range s.Matchers {
		filter = append(filter, fmt.Sprintf("%s=%q", m.Name, m.Value))
	}
	var out Found
	var hit bool
	err := c.each(ctx, "list silences", func(ctx context.Context, api *amclient.AlertmanagerAPI) error {
		ok, err := api.Silence.GetSilences(silence.NewGetSilencesParamsWithContext(ctx).WithFilter(filter))
		if err != nil {
			return err
		}
		for _, g := range ok.Payload {
			f := fromModel(g)
			if f.State != models.SilenceStatusStateExpired && f.Comment == s.Comment && sameMatchers(f.Matchers, s.Matchers) {
				out, hit = f, true
				return nil
			}
		}
		return nil
	})
	return out, hit, err
}

// Get returns silence id as Alertmanager holds it.
func (c *Client) Get(ctx context.Context, id string) (Found, error) {
	var out Found
	err := c.each(ctx, "read silence "+id, func(ctx context.Context, api *amclient.AlertmanagerAPI) error {
		ok, err := api.Silence.GetSilence(silence.NewGetSilenceParamsWithContext(ctx).WithSilenceID(strfmt.UUID(id)))
		if err == nil {
			out = fromModel(ok.Payload)
		}
		return err
	})
	return out, err
}

// Expire ends silence id now. A silence already expired is done, not an
// error: an Unsilence clicked twice, or retried, expires it once.
func (c *Client) Expire(ctx context.Context, id string) error {
	if f, err := c.Get(ctx, id); err == nil && f.State == models.SilenceStatusStateExpired {
		return nil
	}
	return c.each(ctx, "expire silence "+id, func(ctx context.Context, api *amclient.AlertmanagerAPI) error {
		_, err := api.Silence.DeleteSilence(silence.NewDeleteSilenceParamsWithContext(ctx).WithSilenceID(strfmt.UUID(id)))
		return err
	})
}

func toModel(ms []Matcher) models.Matchers {
	out := make(models.Matchers, 0, len(ms))
	for _, m := range ms {
		name, value, yes, no := m.Name, m.Value, true, false
		out = append(out, &models.Matcher{Name: &name, Value: &value, IsEqual: &yes, IsRegex: &no})
	}
	return out
}

func fromModel(g *models.GettableSilence) Found {
	f := Found{ID: deref(g.ID)}
	if g.Status != nil {
		f.State = deref(g.Status.State)
	}
	if g.EndsAt != nil {
		f.EndsAt = time.Time(*g.EndsAt)
	}
	f.CreatedBy, f.Comment = deref(g.CreatedBy), deref(g.Comment)
	for _, m := range g.Matchers {
		if m == nil || (m.IsRegex != nil && *m.IsRegex) || (m.IsEqual != nil && !*m.IsEqual) {
			f.Matchers = append(f.Matchers, Matcher{Name: "~" + deref(m.Name), Value: deref(m.Value)})
			continue
		}
		f.Matchers = append(f.Matchers, Matcher{Name: deref(m.Name), Value: deref(m.Value)})
	}
	return f
}

// sameMatchers compares as sets: Alertmanager may return them in its order.
func sameMatchers(a, b []Matcher) bool {
	if len(a) != len(b) {
		return false
	}
	for _, m := range b {
		if !slices.Contains(a, m) {
			return false
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
