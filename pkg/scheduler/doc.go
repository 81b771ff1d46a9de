// Package scheduler holds Lockstep's kube-scheduler plugins. Each plugin is
// thin glue between the scheduler framework and the pure placement logic in
// pkg/topology; cmd/scheduler only registers them.
package scheduler
