package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
)

// TestServeSilenceSurvivesKill9: kill -9 the daemon after Alertmanager made
// the silence and before the daemon recorded it (a proxy makes the silence,
// then holds the answer back), restart it on the same store: the pending
// action is resumed, finds the silence it made by its matchers and comment,
// and the thread gets one reply; Alertmanager holds one silence. For SQLite
// and PostgreSQL.
func TestServeSilenceSurvivesKill9(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			am := testenv.StartAlertmanager(t, amNoReceivers)
			proxy := newHangingAM(t, am.URL)
			rig := newSilenceRig(t, "E2ESilenceKill", name == "postgres", proxy.srv.URL)
			d, stub := rig.d, rig.stub
			id, parent := rig.fire(t, "E2ESilenceKill", "5113ce0000000002")
			proxy.hang.Store(true)
			click(t, d, alice, parent.TS, "1795921400.000001", slacknotify.SilenceAction("4h"), id)
			select {
			case <-proxy.created:
			case <-time.After(30 * time.Second):
				t.Fatal("the daemon never asked Alertmanager for the silence")
			}
			d.Proc.Kill9()
			proxy.hang.Store(false)
			if rs := actionReplies(threadOf(t, stub, id)); len(rs) != 0 {
				t.Fatalf("a reply before the restart: %+v", rs)
			}

			startDaemon(t, rig.o) // same port, storage and database
			waitFor(t, 60*time.Second, "the resumed action's reply", func() bool {
				return len(actionReplies(threadOf(t, stub, id))) > 0
			})
			time.Sleep(2 * time.Second) // a second silence or reply would come by now
			sils := amSilences(t, am.URL)
			if len(sils) != 1 || sils[0].Status.State != "active" || !strings.Contains(sils[0].CreatedBy, "alice") {
				t.Fatalf("Alertmanager holds %+v, want alice's one active silence", sils)
			}
			rs := actionReplies(threadOf(t, stub, id))
			if len(rs) != 1 || !strings.Contains(rs[0].Text, sils[0].ID) {
				t.Fatalf("replies %+v, want one naming silence %s", rs, sils[0].ID)
			}
		})
	}
}
