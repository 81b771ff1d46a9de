package bench

import (
	"fmt"
	"strings"
)

// PriorityClass is a PriorityClass a trace may name in its priority column.
// The runner creates the classes a trace uses on each replay cluster, so
// every scheduler sees the same priorities.
type PriorityClass struct {
	Name  string
	Value int32
}

// The benchmark's priority classes: a release run and the work it may
// displace.
const (
	PriorityHigh = "bench-high"
	PriorityLow  = "bench-low"
)

// PriorityClasses are the classes a trace may name, highest first: the
// order of the report's Priorities table.
var PriorityClasses = []PriorityClass{
	{Name: PriorityHigh, Value: 1000},
	{Name: PriorityLow, Value: 100},
}

// LookupPriorityClass returns the class of PriorityClasses named name.
func LookupPriorityClass(name string) (PriorityClass, bool) {
	for _, c := range PriorityClasses {
		if c.Name == name {
			return c, true
		}
	}
	return PriorityClass{}, false
}

// UsedPriorityClasses returns the classes jobs name, highest first.
func UsedPriorityClasses(jobs []Job) []PriorityClass {
	var used []PriorityClass
	for _, c := range PriorityClasses {
		for _, j := range jobs {
			if j.Priority == c.Name {
				used = append(used, c)
				break
			}
		}
	}
	return used
}

func checkPriority(name string) error {
	if _, ok := LookupPriorityClass(name); name != "" && !ok {
		names := make([]string, len(PriorityClasses))
		for i, c := range PriorityClasses {
			names[i] = c.Name
		}
		return fmt.Errorf("priority class %q is not one of the benchmark's: name %s, or leave it empty for none", name, strings.Join(names, " or "))
	}
	return nil
}
