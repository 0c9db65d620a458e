package artifacts

import (
	"regexp"
	"testing"
)

func TestReplicaName(t *testing.T) {
	if got := ReplicaName("autocapture-0"); got != "autocapture-0" {
		t.Errorf("configured name changed to %q", got)
	}
	got := ReplicaName("")
	if !queueName.MatchString("autocapture_upload_"+got) || len("autocapture_upload_"+got) > 64 {
		t.Errorf("hostname gives replica %q: not a River queue name", got)
	}
}

// queueName is River's rule for queue names.
var queueName = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)
