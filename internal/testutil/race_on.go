//go:build race

package testutil

// raceEnabled: the race detector reserves shadow memory as the heap grows.
const raceEnabled = true
