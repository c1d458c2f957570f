//go:build !race

package iwarp

// raceEnabled is true under the race detector; see race.go.
const raceEnabled = false

func (t *txPath) raceRelease()   {}
func (d *rxReader) raceAcquire() {}
