//go:build race

package main

// raceEnabled: the tests run under the race detector, which multiplies
// the memory of every goroutine and allocation (TestStreamFloodMemory).
const raceEnabled = true
