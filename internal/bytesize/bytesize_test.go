package bytesize

import (
	"math"
	"testing"
)

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 100000: "97.7 KiB",
		2 << 30: "2.0 GiB", 3 << 40: "3.0 TiB", math.MaxInt64: "8.0 EiB",
	} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
