// Package bench is the pure core of lockstep-bench: it reads and generates
// job traces, turns what a runner observed while replaying a trace against one
// scheduler into metrics, and writes the comparison report (Markdown, JSON,
// PNG plots). It does no cluster I/O: cmd/lockstep-bench brings up the
// clusters, replays the trace and hands the observations in as a Run.
//
// # Trace format
//
// A trace is CSV. The first line that is not a comment is the header
//
//	job_id,submit_s,replicas,gpus_per_replica,duration_s,topology
//
// and every further line is one job:
//
//   - job_id: a DNS-1123 label of at most 40 characters (lower-case letters,
//     digits and '-', starting and ending with a letter or digit), unique in
//     the trace: it becomes the TrainingJob's name.
//   - submit_s: when the job is submitted, in decimal seconds from the start
//     of the trace (0, 12, 1.25); at least 0.
//   - replicas: the number of pods of the gang, at least 1.
//   - gpus_per_replica: GPUs per pod, 0 to 64.
//   - duration_s: how long each pod runs once running, decimal seconds,
//     more than 0.
//   - topology: empty for no constraint, or "<level>:<mode>" with level a
//     level name of the cluster model ("leaf") and mode Required or
//     Preferred, e.g. "leaf:Required".
//
// Two optional columns may follow, in this order, each only when the header
// names it (TraceHeaderCommFraction, TraceHeaderPriority, TraceHeaderAll):
//
//   - comm_fraction: the share of step time in collectives at ideal
//     placement, in [0, 1); an empty cell takes DefaultCommFraction.
//     RuntimeModel slows that share by the placement's Rating.
//   - priority: the name of one of PriorityClasses (bench-high, bench-low)
//     or empty for none; the job's pods get that PriorityClass.
//
// Lines starting with '#' are comments; blank lines are skipped. Rows need
// not be sorted: ParseTrace orders jobs by submission time, then ID.
//
//	# two gangs and a single-GPU job
//	job_id,submit_s,replicas,gpus_per_replica,duration_s,topology
//	pretrain,0,4,8,600,leaf:Required
//	finetune,30,2,8,120,leaf:Preferred
//	notebook,45.5,1,1,90,
//
// docs/benchmarks.md defines every metric Summarize computes.
package bench
