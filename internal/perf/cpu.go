package perf

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMeter reads the CPU time of this process (the scheduler under test,
// with the benchmark's own informer) and of the control plane it started
// (kube-apiserver and etcd, its child processes). All share one machine:
// what the control plane spends per bind bounds how fast any scheduler can
// bind, and the two numbers side by side say which one a run was waiting
// on. Linux only: elsewhere the control plane reads as zero.
type cpuMeter struct {
	self, controlPlane time.Duration
}

func readCPU() cpuMeter {
	return cpuMeter{self: selfCPU(), controlPlane: childrenCPU(os.Getpid())}
}

// since returns the CPU spent since m.
func (m cpuMeter) since() cpuMeter {
	now := readCPU()
	return cpuMeter{self: now.self - m.self, controlPlane: now.controlPlane - m.controlPlane}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// ProcessCPU is the user and system time process pid has spent
// (/proc/<pid>/stat fields 14 and 15); zero once it is gone, and off Linux.
func ProcessCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, cpu, ok := parseStat(raw)
	if !ok {
		return 0
	}
	return cpu
}

// parseStat reads the parent and the CPU time from a /proc/<pid>/stat.
func parseStat(raw []byte) (ppid int, cpu time.Duration, ok bool) {
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after its last ')'.
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(raw[end+1:]))
	if len(fields) < 13 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(fields[1])
	utime, err2 := strconv.ParseInt(fields[11], 10, 64)
	stime, err3 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	return ppid, time.Duration(utime+stime) * clockTick, true
}

// childrenCPU sums the CPU time of the live descendants of pid.
func childrenCPU(pid int) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parents := map[int]int{}
	times := map[int]time.Duration{}
	for _, path := range stats {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		id, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(path, "/stat"), "/proc/"))
		if err != nil {
			continue
		}
		ppid, cpu, ok := parseStat(raw)
		if !ok {
			continue
		}
		parents[id] = ppid
		times[id] = cpu
	}
	var total time.Duration
	for id, t := range times {
		for p := parents[id]; p != 0; p = parents[p] {
			if p == pid {
				total += t
				break
			}
			if _, known := parents[p]; !known {
				break
			}
		}
	}
	return total
}
