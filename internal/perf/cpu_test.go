package perf

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// TestChildrenCPU counts the CPU of a child process that is still running,
// and none of a process that is not ours.
func TestChildrenCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before := readCPU()
	// Burns CPU, then stays alive until killed.
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for before.since().controlPlane <= 0 {
		if time.Now().After(deadline) {
			t.Fatal("the busy child's CPU was never counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := childrenCPU(os.Getppid()); got < 0 {
		t.Errorf("childrenCPU of our parent = %v", got)
	}
	if got := childrenCPU(child.Process.Pid); got != 0 {
		t.Errorf("the child has no children, but childrenCPU counts %v", got)
	}
}
