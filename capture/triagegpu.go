package capture

// The gpu-degraded rule (issue: "the GPU"), over the gpu step's GPUView
// (views.go). CONTRACT STUB: the GPU helper fills these in.

// gpuDegraded says whether a GPU under the instance is degraded in the window.
func (r reading) gpuDegraded() bool { return false }

// gpuEvidence are gpu-degraded's evidence lines.
func gpuEvidence(r reading) []string { return nil }
