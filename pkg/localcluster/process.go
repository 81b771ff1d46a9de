package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a child process of the harness: one of our components or a tool.
// Its stdout and stderr go to <logDir>/<name>.log.
type Process struct {
	Name    string
	LogPath string
	// Started is when the process was started.
	Started time.Time
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	ended   time.Time // set before done closes
}

// StartOptions say how a process relates to the harness.
type StartOptions struct {
	// Detached processes outlive the harness (cluster-up). Attached ones, the
	// default, are killed by the kernel when the harness dies, even by SIGKILL,
	// so an interrupted test run never leaves them behind.
	Detached bool
	// Env is added to the harness's environment.
	Env []string
}

// StartProcess starts bin with args. It runs in its own process group so a
// terminal's Ctrl-C reaches the harness, which then stops children in order.
func StartProcess(name, logDir, bin string, args []string, opts StartOptions) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log for %s: %w", name, err)
	}
	defer logFile.Close()

	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if opts.Detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, LogPath: logPath, Started: time.Now(), cmd: cmd, done: make(chan struct{})}
	// A detached process stays our child while the harness lives; waiting on it
	// keeps Exited truthful and reaps it if it dies early.
	go func() {
		p.waitErr = cmd.Wait()
		p.ended = time.Now()
		close(p.done)
	}()
	return p, nil
}

// Args returns the arguments the process was started with, without the
// binary: the truth about a restarted component's flags (its ports).
func (p *Process) Args() []string { return p.cmd.Args[1:] }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// PeakRSS returns the most resident memory the running process has used
// (VmHWM of /proc/<pid>/status), in bytes. Read it before stopping the
// process: the kernel forgets it with the process.
func (p *Process) PeakRSS() (uint64, error) {
	return peakRSS(fmt.Sprintf("/proc/%d/status", p.Pid()))
}

// peakRSS reads VmHWM from a /proc/<pid>/status file.
func peakRSS(statusPath string) (uint64, error) {
	data, err := os.ReadFile(statusPath)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: VmHWM %q: %w", statusPath, rest, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%s has no VmHWM line", statusPath)
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Ran returns how long the process ran: until it exited, or until now.
func (p *Process) Ran() time.Duration {
	if exited, _ := p.Exited(); exited {
		return p.ended.Sub(p.Started)
	}
	return time.Since(p.Started)
}

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs
// it. It is safe to call on a process that has already exited.
func (p *Process) Stop(grace time.Duration) error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", p.Name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", p.Name, err)
	}
	<-p.done
	return nil
}

// Kill ends the process at once with SIGKILL, as a crash would.
func (p *Process) Kill() error {
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", p.Name, err)
	}
	<-p.done
	return nil
}

// KillPIDFile stops a detached process recorded in a pid file by cluster-up,
// SIGTERM first and SIGKILL after grace. A missing file or process is fine.
func KillPIDFile(path string, grace time.Duration) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var pid int
	if _, err := fmt.Sscanf(string(data), "%d", &pid); err != nil || pid <= 1 {
		return fmt.Errorf("pid file %s: bad content %q", path, data)
	}
	// Detached processes lead their own session, so the pid is the group id.
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.Remove(path)
		}
		return fmt.Errorf("stopping pid %d from %s: %w", pid, path, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return os.Remove(path)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return os.Remove(path)
}
