package nemesis

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseFaults(t *testing.T) {
	all, err := ParseFaults("all")
	if err != nil || !reflect.DeepEqual(all, All) {
		t.Fatalf("all: %v %v", all, err)
	}
	if none, err := ParseFaults("none"); err != nil || len(none) != 0 {
		t.Fatalf("none: %v %v", none, err)
	}
	got, err := ParseFaults("kill, partition")
	if err != nil || !reflect.DeepEqual(got, []string{Kill, Partition}) {
		t.Fatalf("list: %v %v", got, err)
	}
	if _, err := ParseFaults("kill,meteor"); !errors.Is(err, ErrUnknownFault) {
		t.Fatalf("unknown fault: %v", err)
	}
}

func TestFmtGroups(t *testing.T) {
	if got := fmtGroups([][]string{{"n1"}, {"n2", "n3"}}); got != "{n1} {n2,n3}" {
		t.Fatalf("got %q", got)
	}
}
