package topologyplacement

import v1 "k8s.io/api/core/v1"

// Plans reports whether PreFilter plans pod with its gang, as far as the pod
// itself tells: a PodGroup member that requests nvidia.com/gpu (planKey).
// For such a pod PreFilter checks that every member of its plan fits on the
// nodes' free GPUs, CPU and memory at once, which decides more than a
// cluster-wide sum of the gang's resources can.
//
// A member that asks for GPUs through ResourceClaims is planned too, but
// telling it needs the claims, which only the plugin's DRA view resolves:
// Plans says false for it, so a caller that skips work for planned pods
// keeps doing that work for those.
func Plans(pod *v1.Pod) bool { return planKey(pod) != "" }
