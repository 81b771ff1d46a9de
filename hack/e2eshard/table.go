package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// table is shards.txt: comment lines, "group PREFIX..." lines, and "TEST
// SECONDS" lines.
type table struct {
	header []string // comment lines, kept on rewrite
	// groups are lists of name prefixes: the tests matching any prefix of
	// one group share a shard.
	groups [][]string
	secs   map[string]float64
}

func readTable(path string) (*table, error) {
	t := &table{secs: map[string]float64{}}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		fields := strings.Fields(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			if len(t.groups) == 0 && len(t.secs) == 0 {
				t.header = append(t.header, sc.Text())
			}
		case len(fields) >= 2 && fields[0] == "group":
			t.groups = append(t.groups, fields[1:])
		case len(fields) == 2:
			secs, err := strconv.ParseFloat(fields[1], 64)
			if err != nil || secs < 0 {
				return nil, fmt.Errorf("%s:%d: want \"TEST SECONDS\", got %q", path, n, line)
			}
			t.secs[fields[0]] = secs
		default:
			return nil, fmt.Errorf("%s:%d: want \"group PREFIX...\" or \"TEST SECONDS\", got %q", path, n, line)
		}
	}
	return t, sc.Err()
}

// groupOf is the key test shares a shard under: the first group with a
// prefix of its name, or the test alone.
func (t *table) groupOf(test string) string {
	for i, g := range t.groups {
		for _, prefix := range g {
			if strings.HasPrefix(test, prefix) {
				return "group:" + strconv.Itoa(i)
			}
		}
	}
	return "test:" + test
}

// seconds is test's last measured duration, or defaultSeconds.
func (t *table) seconds(test string) float64 {
	if s, ok := t.secs[test]; ok {
		return s
	}
	return defaultSeconds
}

// write saves the table with measured durations replacing the old ones;
// tests this run did not measure (a -run subset) keep theirs.
func (t *table) write(path string, measured map[string]float64) error {
	merged := map[string]float64{}
	for k, v := range t.secs {
		merged[k] = v
	}
	for k, v := range measured {
		merged[k] = v
	}
	var b bytes.Buffer
	for _, h := range t.header {
		fmt.Fprintln(&b, h)
	}
	for _, g := range t.groups {
		fmt.Fprintf(&b, "group %s\n", strings.Join(g, " "))
	}
	names := make([]string, 0, len(merged))
	for k := range merged {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%s %.1f\n", k, merged[k])
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
