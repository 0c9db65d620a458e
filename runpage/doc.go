// Package runpage renders the run pages: GET /runs (a list, paged and
// filtered like GET /api/v1/runs), GET /runs/{id} (one run: its answer,
// timeline, verdict history, charts, slowest traces, profile, artifacts,
// steps and actions) and the Silence form a signed-in reader posts from it.
// Package handlers routes to them and decides who is let in; this package
// only renders, with html/template from the templates embedded here.
//
// Every label, annotation and finding is untrusted: shownRun bounds it and
// shows control characters escaped, html/template escapes it for where it
// lands, and the page's Content-Security-Policy allows no script at all.
package runpage
