// Package bytesize writes a byte count for people, in binary units: 512 B,
// 97.7 KiB, 2.0 GiB. The profile report, the run page and the byte cap's
// errors print sizes the same way through it.
package bytesize

import "fmt"

// Format writes n with one decimal in the largest binary unit it reaches
// (B, KiB … EiB).
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
