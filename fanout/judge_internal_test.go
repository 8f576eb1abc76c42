package fanout

import "testing"

// judge asks "beyond the end" of the offsets read before the log and
// "truncated" of those read after it: records appended and projected
// between the reads stop nothing, a log that really lost records or
// deleted unprojected ones still stops the partition.
func TestJudgeReadsAroundTheLog(t *testing.T) {
	log := LogState{Topic: "t", Start: map[int32]int64{0: 0, 1: 10}, End: map[int32]int64{0: 6, 1: 20}}
	at := func(n int64) *StoredOffset { return &StoredOffset{Next: n} }
	for _, tc := range []struct {
		name          string
		p             int32
		before, after *StoredOffset
		want          string
	}{
		{"projected past the end read meanwhile", 0, at(5), at(9), ""},
		{"beyond the end before the log was read", 0, at(9), at(9), StopOffsetBeyondEnd},
		{"within the log", 1, at(12), at(15), ""},
		{"below the start after the log was read", 1, at(8), at(9), StopLogTruncated},
		{"below the start only before (projected meanwhile)", 1, at(8), at(11), ""},
		{"nothing stored, the log starts later", 1, nil, nil, StopLogTruncated},
	} {
		if got, _ := judge(tc.p, tc.before, tc.after, log); got != tc.want {
			t.Errorf("%s: judge = %q, want %q", tc.name, got, tc.want)
		}
		if tc.name == "projected past the end read meanwhile" {
			if got, _ := Diagnose(tc.p, tc.after, log); got != StopOffsetBeyondEnd {
				t.Errorf("the single read after the log says %q: the race judge avoids", got)
			}
		}
	}
}
