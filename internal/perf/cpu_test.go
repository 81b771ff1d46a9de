package perf

import (
	"bufio"
	"os/exec"
	"runtime"
	"testing"
)

// TestChildrenCPU counts the CPU of a child process while it runs, not once
// it is gone, and none for a process without children. Off Linux, where
// there is no /proc to read, the control plane reads as zero.
func TestChildrenCPU(t *testing.T) {
	before := readCPU()
	// Burns CPU, says so, then stays alive until killed.
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo burned; exec sleep 600")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "burned\n" {
		t.Fatalf("the child said %q (%v), want burned", line, err)
	}
	spent := before.since().controlPlane
	if runtime.GOOS != "linux" {
		if spent != 0 {
			t.Errorf("off Linux the children's CPU reads as %v, want 0", spent)
		}
		return
	}
	if spent <= 0 {
		t.Errorf("a child that burned CPU counts %v", spent)
	}
	if got := childrenCPU(child.Process.Pid); got != 0 {
		t.Errorf("the child has no children, but childrenCPU counts %v", got)
	}
	if own := ProcessCPU(child.Process.Pid); own <= 0 || own > spent {
		t.Errorf("ProcessCPU of the child = %v, want more than 0 and at most its parent's count %v", own, spent)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if gone := before.since().controlPlane; gone != 0 {
		t.Errorf("after the child was reaped its CPU still counts: %v", gone)
	}
	if gone := ProcessCPU(child.Process.Pid); gone != 0 {
		t.Errorf("ProcessCPU of a reaped process = %v, want 0", gone)
	}
}
