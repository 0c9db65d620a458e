// Package artifacts owns what happens to a run's artifacts around its steps:
// for now the run's byte cap over the store its steps put to (bytecap.go).
package artifacts
