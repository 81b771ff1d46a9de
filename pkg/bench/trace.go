package bench

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Job is one entry of a trace: a gang of Replicas pods with GPUsPerReplica
// GPUs each, submitted Submit after the trace starts, each pod running for
// Duration once it runs.
type Job struct {
	ID             string
	Submit         time.Duration
	Replicas       int
	GPUsPerReplica int
	Duration       time.Duration
	// Topology is nil for a job without a topology constraint.
	Topology *Constraint
	// CommFraction is the share of the job's step time spent in collectives
	// at its ideal placement, in [0, 1); nil for DefaultCommFraction.
	CommFraction *float64
	// Priority is the name of one of PriorityClasses; "" for none (the
	// cluster's default priority, 0).
	Priority string
}

// GPUs returns the job's total GPU count.
func (j Job) GPUs() int { return j.Replicas * j.GPUsPerReplica }

// Constraint is a job's topology constraint, as a TrainingJob spells it.
type Constraint struct {
	// Level is a level name of the cluster model, e.g. "leaf".
	Level string
	// Mode is ModeRequired or ModePreferred.
	Mode string
}

// Constraint modes.
const (
	ModeRequired  = "Required"
	ModePreferred = "Preferred"
)

// Limits of a trace entry.
const (
	// MaxJobIDLength leaves room in 63-character object names for the
	// suffixes the controller appends to a TrainingJob's name.
	MaxJobIDLength = 40
	// MaxGPUsPerReplica is the most GPUs one node has (topology.MaxGPUs).
	MaxGPUsPerReplica = topology.MaxGPUs
)

// TraceHeader is the header line of a trace without optional columns.
// The optional columns, ColumnCommFraction and ColumnPriority, follow it in
// that order, each only when the trace uses it: a header names every column
// a row has, so rows are read by the header's names and stay unambiguous
// whichever optional columns are given. TraceHeaderCommFraction and
// TraceHeaderPriority are the headers with one of them, TraceHeaderAll the
// header with both.
const (
	TraceHeader             = "job_id,submit_s,replicas,gpus_per_replica,duration_s,topology"
	TraceHeaderCommFraction = TraceHeader + "," + ColumnCommFraction
	TraceHeaderPriority     = TraceHeader + "," + ColumnPriority
	TraceHeaderAll          = TraceHeaderCommFraction + "," + ColumnPriority
)

// Names of the optional trace columns.
const (
	ColumnCommFraction = "comm_fraction"
	ColumnPriority     = "priority"
)

// optionalColumns are the optional columns in the order a header lists
// them.
var optionalColumns = []string{ColumnCommFraction, ColumnPriority}

// Column indices of the columns every trace row has.
const (
	colID = iota
	colSubmit
	colReplicas
	colGPUs
	colDuration
	colTopology
	requiredColumns
)

// TraceError is a problem at one place of a trace file.
type TraceError struct {
	Line int
	// Column is the 1-based byte column of the field; 0 when the problem is
	// the whole line.
	Column int
	// Field is the header name of the column, "" for the whole line.
	Field string
	// Problem says what is wrong and how to fix it.
	Problem string
}

func (e *TraceError) Error() string {
	if e.Column == 0 {
		return fmt.Sprintf("trace line %d: %s", e.Line, e.Problem)
	}
	return fmt.Sprintf("trace line %d, column %d (%s): %s", e.Line, e.Column, e.Field, e.Problem)
}

// ParseTrace reads a trace in the CSV format of the package documentation
// and returns its jobs sorted by submission time, then ID. Errors are
// *TraceError values naming the line and column, or a read error.
func ParseTrace(r io.Reader) ([]Job, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1 // counted here, to say which fields are missing
	cr.ReuseRecord = true

	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &TraceError{Line: 1, Problem: "the trace is empty: start it with the header " + TraceHeader}
	}
	if err != nil {
		return nil, csvError(err)
	}
	traceHeader := trimAll(header)
	if !validHeader(traceHeader) {
		line, _ := cr.FieldPos(0)
		return nil, &TraceError{Line: line, Problem: fmt.Sprintf("header is %q: the first line that is not a comment must be exactly %s, optionally followed by %s",
			strings.Join(header, ","), TraceHeader, strings.Join(optionalColumns, " and then ")+", e.g. "+TraceHeaderAll)}
	}

	var jobs []Job
	firstLine := map[string]int{}
	for {
		record, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(err)
		}
		line, _ := cr.FieldPos(0)
		if len(record) != len(traceHeader) {
			return nil, &TraceError{Line: line, Problem: fmt.Sprintf("%d fields, want %d (%s); leave topology empty but keep its comma",
				len(record), len(traceHeader), strings.Join(traceHeader, ","))}
		}
		job, err := parseJob(cr, traceHeader, record)
		if err != nil {
			return nil, err
		}
		if first, dup := firstLine[job.ID]; dup {
			_, col := cr.FieldPos(colID)
			return nil, &TraceError{Line: line, Column: col, Field: traceHeader[colID],
				Problem: fmt.Sprintf("job %q is already defined on line %d: give every job its own ID", job.ID, first)}
		}
		firstLine[job.ID] = line
		jobs = append(jobs, job)
	}
	if len(jobs) == 0 {
		line, _ := cr.FieldPos(0)
		return nil, &TraceError{Line: line, Problem: "the trace has no jobs: add one line per job after the header"}
	}
	SortJobs(jobs)
	return jobs, nil
}

// validHeader reports whether header is TraceHeader followed by some of
// the optional columns, in their order, each at most once.
func validHeader(header []string) bool {
	base := strings.Split(TraceHeader, ",")
	if len(header) < len(base) || !slices.Equal(header[:len(base)], base) {
		return false
	}
	next := 0
	for _, name := range header[len(base):] {
		i := slices.Index(optionalColumns, name)
		if i < next {
			return false
		}
		next = i + 1
	}
	return true
}

// parseJob reads one row of a trace with header traceHeader; cr locates its
// fields for errors.
func parseJob(cr *csv.Reader, traceHeader, record []string) (Job, error) {
	fail := func(col int, problem string) error {
		line, column := cr.FieldPos(col)
		return &TraceError{Line: line, Column: column, Field: traceHeader[col], Problem: problem}
	}
	field := func(col int) string { return strings.TrimSpace(record[col]) }

	job := Job{ID: field(colID)}
	if err := checkID(job.ID); err != nil {
		return Job{}, fail(colID, err.Error())
	}
	var err error
	if job.Submit, err = parseSeconds(field(colSubmit)); err == nil {
		err = checkSubmit(job.Submit)
	}
	if err != nil {
		return Job{}, fail(colSubmit, err.Error())
	}
	if job.Replicas, err = parseCount(field(colReplicas)); err == nil {
		err = checkReplicas(job.Replicas)
	}
	if err != nil {
		return Job{}, fail(colReplicas, err.Error())
	}
	if job.GPUsPerReplica, err = parseCount(field(colGPUs)); err == nil {
		err = checkGPUsPerReplica(job.GPUsPerReplica)
	}
	if err != nil {
		return Job{}, fail(colGPUs, err.Error())
	}
	if job.Duration, err = parseSeconds(field(colDuration)); err == nil {
		err = checkDuration(job.Duration)
	}
	if err != nil {
		return Job{}, fail(colDuration, err.Error())
	}
	if job.Topology, err = parseConstraint(field(colTopology)); err != nil {
		return Job{}, fail(colTopology, err.Error())
	}
	for col := requiredColumns; col < len(traceHeader); col++ {
		switch traceHeader[col] {
		case ColumnCommFraction:
			job.CommFraction, err = parseCommFraction(field(col))
		case ColumnPriority:
			job.Priority = field(col)
			err = checkPriority(job.Priority)
		}
		if err != nil {
			return Job{}, fail(col, err.Error())
		}
	}
	return job, nil
}

// csvError turns encoding/csv's syntax errors into TraceErrors.
func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &TraceError{Line: pe.Line, Column: pe.Column, Field: "csv",
			Problem: pe.Err.Error() + `: quote a field containing quotes as "a ""b"" c", or remove the quotes`}
	}
	return fmt.Errorf("reading the trace: %w", err)
}

func trimAll(fields []string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = strings.TrimSpace(f)
	}
	return out
}

// WriteTrace writes jobs, in the given order, in the format ParseTrace
// reads. An optional column is written only when some job sets it
// (CommFraction, Priority), so traces without them stay in the six-column
// format. It fails, writing nothing, on a job ParseTrace would reject.
func WriteTrace(w io.Writer, jobs []Job) error {
	seen := make(map[string]int, len(jobs))
	var withCommFraction, withPriority bool
	for i, j := range jobs {
		withCommFraction = withCommFraction || j.CommFraction != nil
		withPriority = withPriority || j.Priority != ""
		if err := j.Validate(); err != nil {
			return fmt.Errorf("jobs[%d]: %w", i, err)
		}
		if first, dup := seen[j.ID]; dup {
			return fmt.Errorf("jobs[%d]: ID %q is also jobs[%d]'s", i, j.ID, first)
		}
		seen[j.ID] = i
	}
	header := TraceHeader
	if withCommFraction {
		header += "," + ColumnCommFraction
	}
	if withPriority {
		header += "," + ColumnPriority
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(strings.Split(header, ",")); err != nil {
		return fmt.Errorf("writing the trace header: %w", err)
	}
	for _, j := range jobs {
		topo := ""
		if j.Topology != nil {
			topo = j.Topology.Level + ":" + j.Topology.Mode
		}
		row := []string{j.ID, formatSeconds(j.Submit), strconv.Itoa(j.Replicas), strconv.Itoa(j.GPUsPerReplica), formatSeconds(j.Duration), topo}
		if withCommFraction {
			cf := ""
			if j.CommFraction != nil {
				cf = strconv.FormatFloat(*j.CommFraction, 'f', -1, 64)
			}
			row = append(row, cf)
		}
		if withPriority {
			row = append(row, j.Priority)
		}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("writing job %s: %w", j.ID, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing the trace: %w", err)
	}
	return nil
}

// Validate checks the job against the rules of the trace format.
func (j Job) Validate() error {
	checks := []struct {
		field string
		err   error
	}{
		{"job_id", checkID(j.ID)},
		{"submit_s", checkSubmit(j.Submit)},
		{"replicas", checkReplicas(j.Replicas)},
		{"gpus_per_replica", checkGPUsPerReplica(j.GPUsPerReplica)},
		{"duration_s", checkDuration(j.Duration)},
		{"topology", checkConstraint(j.Topology)},
		{ColumnCommFraction, checkCommFraction(j.CommFraction)},
		{ColumnPriority, checkPriority(j.Priority)},
	}
	var errs []error
	for _, c := range checks {
		if c.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.field, c.err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("job %q: %w", j.ID, err)
	}
	return nil
}

// SortJobs orders jobs by submission time, then ID: the order of a replay.
func SortJobs(jobs []Job) {
	slices.SortStableFunc(jobs, func(a, b Job) int {
		return cmp.Or(cmp.Compare(a.Submit, b.Submit), strings.Compare(a.ID, b.ID))
	})
}

// Compress returns the jobs with Submit and Duration divided by factor, so a
// trace of an hour replays in six minutes with factor 10. A factor below 1
// (or NaN) leaves the times unchanged: validating the flag is the caller's
// job. Durations stay at least a nanosecond. The input is not modified.
func Compress(jobs []Job, factor float64) []Job {
	if !(factor >= 1) {
		factor = 1
	}
	scale := func(d time.Duration) time.Duration {
		return time.Duration(float64(d)/factor + 0.5)
	}
	out := make([]Job, len(jobs))
	for i, j := range jobs {
		j.Submit = scale(j.Submit)
		j.Duration = max(time.Nanosecond, scale(j.Duration))
		if j.Topology != nil {
			c := *j.Topology
			j.Topology = &c
		}
		if j.CommFraction != nil {
			cf := *j.CommFraction
			j.CommFraction = &cf
		}
		out[i] = j
	}
	return out
}

func checkID(id string) error {
	switch {
	case id == "":
		return errors.New("job ID is empty: name the job, e.g. job-001")
	case len(id) > MaxJobIDLength:
		return fmt.Errorf("job ID %q has %d characters: shorten it to at most %d", id, len(id), MaxJobIDLength)
	case !isDNSLabel(id):
		return fmt.Errorf("job ID %q is not a DNS-1123 label: use lower-case letters, digits and '-', starting and ending with a letter or digit", id)
	}
	return nil
}

func checkSubmit(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("submit time %v is negative: give seconds from the trace start, at least 0", d)
	}
	return nil
}

func checkReplicas(n int) error {
	if n < 1 {
		return fmt.Errorf("replicas = %d: a job needs at least 1 pod", n)
	}
	return nil
}

func checkGPUsPerReplica(n int) error {
	if n < 0 || n > MaxGPUsPerReplica {
		return fmt.Errorf("gpus_per_replica = %d: give 0 to %d GPUs per pod", n, MaxGPUsPerReplica)
	}
	return nil
}

func checkDuration(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("duration %v: pods must run for more than 0 s", d)
	}
	return nil
}

func checkConstraint(c *Constraint) error {
	if c == nil {
		return nil
	}
	if !isDNSLabel(c.Level) {
		return fmt.Errorf("topology level %q is not a level name: name a level of the cluster model, e.g. leaf:Required", c.Level)
	}
	if c.Mode != ModeRequired && c.Mode != ModePreferred {
		return fmt.Errorf("topology mode %q: use %s or %s, e.g. %s:%s", c.Mode, ModeRequired, ModePreferred, c.Level, ModeRequired)
	}
	return nil
}

func checkCommFraction(cf *float64) error {
	if cf != nil && !(*cf >= 0 && *cf < 1) {
		return fmt.Errorf("comm_fraction %v: give the share of step time in collectives at ideal placement, at least 0 and below 1, e.g. 0.3, or leave it empty for the default", *cf)
	}
	return nil
}

// parseCommFraction reads a decimal fraction in [0, 1); "" is the default
// (nil).
func parseCommFraction(s string) (*float64, error) {
	if s == "" {
		return nil, nil
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && c != '.' && c != '-' {
			return nil, fmt.Errorf("%q is not a decimal fraction: write digits with an optional '.', e.g. 0.3, or leave it empty for the default", s)
		}
	}
	cf, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("%q is not a decimal fraction: write digits with an optional '.', e.g. 0.3, or leave it empty for the default", s)
	}
	if err := checkCommFraction(&cf); err != nil {
		return nil, err
	}
	return &cf, nil
}

// parseConstraint reads "<level>:<mode>"; "" is no constraint.
func parseConstraint(s string) (*Constraint, error) {
	if s == "" {
		return nil, nil
	}
	level, mode, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("topology %q has no mode: write <level>:Required or <level>:Preferred, e.g. leaf:Required, or leave it empty", s)
	}
	c := &Constraint{Level: level, Mode: mode}
	if err := checkConstraint(c); err != nil {
		return nil, err
	}
	return c, nil
}

// parseCount reads a non-negative whole number.
func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number: write digits only, e.g. 8", s)
	}
	return n, nil
}

// parseSeconds reads plain decimal seconds ("12", "0.5") exactly, to the
// nanosecond, so WriteTrace and ParseTrace round-trip.
func parseSeconds(s string) (time.Duration, error) {
	digits, dot := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dot++
		case c == '-' && i == 0:
			return 0, fmt.Errorf("%q is negative: give seconds at least 0", s)
		default:
			return 0, fmt.Errorf("%q is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5", s)
		}
	}
	if digits == 0 || dot > 1 {
		return 0, fmt.Errorf("%q is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5", s)
	}
	d, err := time.ParseDuration(s + "s")
	if err != nil {
		return 0, fmt.Errorf("%q seconds is out of range: keep times below 290 years", s)
	}
	return d, nil
}

// formatSeconds writes d as the shortest exact decimal seconds.
func formatSeconds(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	whole, frac := d/time.Second, d%time.Second
	if frac == 0 {
		return sign + strconv.FormatInt(int64(whole), 10)
	}
	return sign + strings.TrimRight(fmt.Sprintf("%d.%09d", whole, frac), "0")
}

// isDNSLabel reports whether s is a DNS-1123 label: at most 63 lower-case
// letters, digits and '-', starting and ending with a letter or digit.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
