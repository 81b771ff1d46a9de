// Package scheduler registers Lockstep's kube-scheduler plugins (OutOfTree),
// which cmd/scheduler and the in-process benchmark (internal/perf)
// both build on:
//
//   - topologyplacement, TopologyPlacement: the framework side of gang
//     placement. Its rules are pure and live in pkg/topology/placement
//     (Decide, Place, Books); the plugin reads pods, PodGroups, nodes and
//     NodeTopology into their inputs, keeps the books under a lock, and
//     turns decisions into statuses, events, metrics and retries.
//   - coscheduling, LockstepCoscheduling: scheduler-plugins' Coscheduling
//     semantics over its exported PodGroup manager, with QueueingHints on
//     the events that free capacity.
//   - requeue: those QueueingHints, shared by both plugins.
package scheduler
