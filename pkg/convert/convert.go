// Package convert turns Kubeflow training jobs (PyTorchJob, TFJob,
// XGBoostJob, PaddleJob and JAXJob of kubeflow.org/v1, MPIJob of
// kubeflow.org/v2beta1) into Lockstep TrainingJobs.
//
// The conversion is mechanical: each Kubeflow field maps to one TrainingJob
// field, and pod templates are carried over exactly as written. A field
// that has no equivalent, or that Kubeflow's schema does not know (a typo,
// a newer version), is refused with its path and document number; nothing
// is dropped silently. What is dropped on purpose (status, fields the API
// server sets) is reported as a warning.
package convert

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Refusal is a field the converter cannot carry over.
type Refusal struct {
	// Document is the 1-based position of the YAML document in the input.
	Document int
	// Object names the Kubeflow object, e.g. "PyTorchJob ml/train".
	Object string
	// Path is the field's path in the Kubeflow object.
	Path   string
	Reason string
}

func (r *Refusal) Error() string {
	where := fmt.Sprintf("document %d", r.Document)
	if r.Object != "" {
		where += " (" + r.Object + ")"
	}
	if r.Path == "" {
		return where + ": " + r.Reason
	}
	return where + ": " + r.Path + ": " + r.Reason
}

// Converted is one TrainingJob made from one Kubeflow object.
type Converted struct {
	// Document is the 1-based position of the source in the input.
	Document int
	// Source names the Kubeflow object, e.g. "PyTorchJob ml/train".
	Source string
	// Job is the TrainingJob, validated.
	Job *v1alpha1.TrainingJob
	// Object is Job as it is written out: pod templates exactly as the
	// source had them, no status.
	Object map[string]any
}

// Result is a conversion's output.
type Result struct {
	Jobs []Converted
	// Warnings report what was dropped on purpose or behaves differently.
	Warnings []string
}

// Convert reads YAML documents of Kubeflow jobs (a kind: List is read item
// by item) and converts each. If any document cannot be converted it
// returns every Refusal, joined, and no jobs.
func Convert(r io.Reader) (*Result, error) {
	res := &Result{}
	var errs []error
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for doc := 1; ; {
		data, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading document %d: %w", doc, err)
		}
		obj, err := parseDocument(data)
		if err != nil {
			errs = append(errs, &Refusal{Document: doc, Reason: err.Error()})
			doc++
			continue
		}
		if obj == nil { // only comments or blank
			continue
		}
		for _, item := range listItems(obj) {
			c := &converter{doc: doc, prefix: item.prefix}
			job := c.convert(item.obj)
			res.Warnings = append(res.Warnings, c.warnings...)
			errs = append(errs, c.refusals...)
			if job != nil {
				res.Jobs = append(res.Jobs, *job)
			}
		}
		doc++
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return res, nil
}

// Write writes the jobs as YAML documents.
func Write(w io.Writer, jobs []Converted) error {
	for i, j := range jobs {
		data, err := yaml.Marshal(j.Object)
		if err != nil {
			return fmt.Errorf("encoding the TrainingJob from document %d: %w", j.Document, err)
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}

func parseDocument(data []byte) (map[string]any, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, nil
	}
	var obj map[string]any
	// utiljson keeps whole numbers as int64, as the API server does.
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	return obj, nil
}

type listItem struct {
	prefix string
	obj    map[string]any
}

// listItems expands a v1 List (kubectl get -o yaml) into its items.
func listItems(obj map[string]any) []listItem {
	items, isList := obj["items"].([]any)
	if obj["kind"] != "List" || !isList {
		return []listItem{{obj: obj}}
	}
	out := make([]listItem, 0, len(items))
	for i, it := range items {
		m, _ := it.(map[string]any)
		out = append(out, listItem{prefix: "items[" + strconv.Itoa(i) + "].", obj: m})
	}
	return out
}

// kindInfo is what the converter knows of one Kubeflow kind at one
// version, and how it reads it.
type kindInfo struct {
	kind       string
	apiVersion string
	framework  v1alpha1.Framework
	// replicasField is the spec field holding the replica specs.
	replicasField string
	// operator is the managedBy value that names Kubeflow's own operator.
	operator string
	// read decodes the object strictly and maps its spec into out
	// (readAs).
	read func(c *converter, data []byte, out *v1alpha1.TrainingJobSpec) (meta metav1.ObjectMeta, status []byte, ok bool)
}

// mpiJobV1 is the training-operator's MPIJob version; mpi-operator serves
// kubeflow.org/v2beta1.
const mpiJobV1 = "kubeflow.org/v1"

const trainingOperator = "kubeflow.org/training-operator"

// kinds are the Kubeflow kinds the converter reads, one row per kind and
// version, a kind's versions together and in the order its refusals name
// them. A new kind is a row here, a spec type in kubeflow.go, and the
// mapping of any field of its own.
var kinds = []kindInfo{
	{"PyTorchJob", "kubeflow.org/v1", v1alpha1.FrameworkPyTorch, "pytorchReplicaSpecs", trainingOperator, readAs((*converter).pytorch)},
	{"TFJob", "kubeflow.org/v1", v1alpha1.FrameworkTensorFlow, "tfReplicaSpecs", trainingOperator, readAs((*converter).tensorflow)},
	{"XGBoostJob", "kubeflow.org/v1", v1alpha1.FrameworkXGBoost, "xgbReplicaSpecs", trainingOperator, readAs[xgboostJobSpec](nil)},
	{"PaddleJob", "kubeflow.org/v1", v1alpha1.FrameworkPaddle, "paddleReplicaSpecs", trainingOperator, readAs((*converter).paddle)},
	{"JAXJob", "kubeflow.org/v1", v1alpha1.FrameworkJAX, "jaxReplicaSpecs", trainingOperator, readAs[jaxJobSpec](nil)},
	{"MPIJob", "kubeflow.org/v2beta1", v1alpha1.FrameworkMPI, "mpiReplicaSpecs", "kubeflow.org/mpi-operator", readAs((*converter).mpi)},
	{"MPIJob", mpiJobV1, v1alpha1.FrameworkMPI, "mpiReplicaSpecs", trainingOperator, readAs((*converter).mpiV1)},
}

// kfSpec is what every Kubeflow kind's spec has: replica specs and a run
// policy.
type kfSpec interface {
	replicaSpecs() kfReplicaSpecs
	runPolicy() *kfRunPolicy
}

// deprecatedCleanPodPolicy is a spec that still has a cleanPodPolicy of its
// own beside runPolicy's (MPIJob kubeflow.org/v1).
type deprecatedCleanPodPolicy interface {
	cleanPodPolicy() *string
}

// readAs returns the read of a kind whose spec is S: decode strictly, map
// the kind's own fields (own, nil when it has none), then the replica specs
// and run policy every kind has, in that order, so refusals come in the
// order of the fields' mapping.
func readAs[S kfSpec](own func(c *converter, src *S, out *v1alpha1.TrainingJobSpec)) func(*converter, []byte, *v1alpha1.TrainingJobSpec) (metav1.ObjectMeta, []byte, bool) {
	return func(c *converter, data []byte, out *v1alpha1.TrainingJobSpec) (metav1.ObjectMeta, []byte, bool) {
		var src kfObject[S]
		if !c.decode(data, &src) {
			return metav1.ObjectMeta{}, nil, false
		}
		spec := src.Spec
		if own != nil {
			own(c, &spec, out)
		}
		c.replicas(spec.replicaSpecs(), out)
		out.RunPolicy = c.runPolicy(spec.runPolicy())
		if d, ok := any(spec).(deprecatedCleanPodPolicy); ok {
			out.RunPolicy = c.mpiV1CleanPodPolicy(d.cleanPodPolicy(), out.RunPolicy)
		}
		return src.Metadata, src.Status, true
	}
}

// lookupKind returns the versions of a Kubeflow kind the converter reads.
func lookupKind(kind string) ([]kindInfo, bool) {
	var versions []kindInfo
	for _, k := range kinds {
		if k.kind == kind {
			versions = append(versions, k)
		}
	}
	return versions, len(versions) > 0
}

// supportedKinds names the kinds, those of the same versions together:
// "PyTorchJob, TFJob (kubeflow.org/v1) and MPIJob (kubeflow.org/v2beta1
// and kubeflow.org/v1)".
var supportedKinds = func() string {
	type group struct {
		kinds    []string
		versions string
	}
	var groups []group
	for _, k := range kinds {
		if n := len(groups); n > 0 && slices.Contains(groups[n-1].kinds, k.kind) {
			continue
		}
		versions, _ := lookupKind(k.kind)
		v := versionList(versions)
		if n := len(groups); n > 0 && groups[n-1].versions == v {
			groups[n-1].kinds = append(groups[n-1].kinds, k.kind)
			continue
		}
		groups = append(groups, group{kinds: []string{k.kind}, versions: v})
	}
	named := make([]string, len(groups))
	for i, g := range groups {
		named[i] = strings.Join(g.kinds, ", ") + " (" + g.versions + ")"
	}
	if len(named) < 2 {
		return strings.Join(named, "")
	}
	return strings.Join(named[:len(named)-1], ", ") + " and " + named[len(named)-1]
}()

// versionList names the versions of a kind: "kubeflow.org/v2beta1 and
// kubeflow.org/v1".
func versionList(versions []kindInfo) string {
	read := make([]string, len(versions))
	for i, k := range versions {
		read[i] = k.apiVersion
	}
	return strings.Join(read, " and ")
}

// converter converts one object, collecting refusals and warnings.
type converter struct {
	doc    int
	prefix string // "items[i]." inside a List
	source string
	kind   kindInfo

	refusals []error
	warnings []string
}

func (c *converter) refuse(path, format string, args ...any) {
	if path != "" {
		path = c.prefix + path
	} else if c.prefix != "" {
		path = strings.TrimSuffix(c.prefix, ".")
	}
	c.refusals = append(c.refusals, &Refusal{Document: c.doc, Object: c.source, Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (c *converter) warn(format string, args ...any) {
	where := fmt.Sprintf("document %d", c.doc)
	if c.source != "" {
		where += " (" + c.source + ")"
	}
	c.warnings = append(c.warnings, where+": "+fmt.Sprintf(format, args...))
}

func (c *converter) convert(obj map[string]any) *Converted {
	if obj == nil {
		c.refuse("", "not a Kubernetes object")
		return nil
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kindName, _ := obj["kind"].(string)
	name, namespace := nestedString(obj, "metadata", "name"), nestedString(obj, "metadata", "namespace")
	c.source = kindName + " " + name
	if namespace != "" {
		c.source = kindName + " " + namespace + "/" + name
	}
	versions, ok := lookupKind(kindName)
	if !ok {
		c.refuse("kind", "unsupported kind %q (%s); the converter reads %s", kindName, apiVersion, supportedKinds)
		return nil
	}
	i := slices.IndexFunc(versions, func(k kindInfo) bool { return k.apiVersion == apiVersion })
	if i < 0 {
		c.refuse("apiVersion", "%s %s is not supported; the converter reads %s %s", kindName, apiVersion, kindName, versionList(versions))
		return nil
	}
	c.kind = versions[i]
	data, err := utiljson.Marshal(obj)
	if err != nil {
		c.refuse("", "%v", err)
		return nil
	}

	job := &v1alpha1.TrainingJob{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob"},
		Spec:     v1alpha1.TrainingJobSpec{Framework: c.kind.framework},
	}
	meta, status, ok := c.kind.read(c, data, &job.Spec)
	if !ok {
		return nil
	}
	if len(status) > 0 {
		c.warn("status dropped: it describes the Kubeflow object's run")
	}
	job.ObjectMeta = c.metadata(meta)
	c.behaviourNotes(job)

	if len(c.refusals) > 0 {
		return nil
	}
	// Validate as the API server would after defaulting; a refusal here
	// names the TrainingJob's field, which differs from Kubeflow's path.
	checked := job.DeepCopy()
	checked.Default()
	for _, e := range checked.Validate() {
		c.refuse("", "the TrainingJob would be invalid: %s", e.Error())
	}
	// The template policy (deploy/default/trainingjob-policy.yaml): some
	// fields are refused everywhere, the privileged ones unless the target
	// namespace allows them, which is not known here.
	refused := map[string]bool{}
	for _, e := range checked.ValidateTemplates(true) {
		refused[e.Error()] = true
		c.refuse("", "the cluster's template policy would refuse the TrainingJob: %s", e.Error())
	}
	for _, e := range checked.ValidateTemplates(false) {
		if !refused[e.Error()] {
			c.warn("the cluster's template policy refuses this unless the namespace allows it: %s", e.Error())
		}
	}
	if len(c.refusals) > 0 {
		return nil
	}
	out, err := c.output(job, obj)
	if err != nil {
		c.refuse("", "%v", err)
		return nil
	}
	return &Converted{Document: c.doc, Source: c.source, Job: job, Object: out}
}

// decode decodes data strictly into v: every field the Kubeflow schema
// does not name is refused by path.
func (c *converter) decode(data []byte, v any) bool {
	strict, err := sigsjson.UnmarshalStrict(data, v)
	if err != nil {
		c.refuse("", "does not match the %s schema: %v", c.source, err)
		return false
	}
	for _, e := range strict {
		var pathErr interface{ FieldPath() string }
		if errors.As(e, &pathErr) {
			c.refuse(pathErr.FieldPath(), "%s: not a field of %s %s (a typo, or a newer version the converter does not know); nothing was converted",
				strings.SplitN(e.Error(), " \"", 2)[0], strings.SplitN(c.source, " ", 2)[0], c.kind.apiVersion)
		} else {
			c.refuse("", "%v", e)
		}
	}
	return len(strict) == 0
}

// serverSetMetadata are the metadata fields the API server fills in; they
// belong to the Kubeflow object and are dropped.
func (c *converter) metadata(m metav1.ObjectMeta) metav1.ObjectMeta {
	var dropped []string
	if m.UID != "" {
		dropped = append(dropped, "uid")
	}
	if m.ResourceVersion != "" {
		dropped = append(dropped, "resourceVersion")
	}
	if m.Generation != 0 {
		dropped = append(dropped, "generation")
	}
	if !m.CreationTimestamp.IsZero() {
		dropped = append(dropped, "creationTimestamp")
	}
	if m.DeletionTimestamp != nil || m.DeletionGracePeriodSeconds != nil {
		dropped = append(dropped, "deletionTimestamp")
	}
	if len(m.ManagedFields) > 0 {
		dropped = append(dropped, "managedFields")
	}
	if m.SelfLink != "" {
		dropped = append(dropped, "selfLink")
	}
	if len(dropped) > 0 {
		c.warn("metadata.%s dropped: the API server sets them", strings.Join(dropped, ", metadata."))
	}
	if len(m.OwnerReferences) > 0 {
		c.refuse("metadata.ownerReferences", "refused: they point at objects that manage the Kubeflow job; remove them, or set them for the TrainingJob yourself")
	}
	if len(m.Finalizers) > 0 {
		c.refuse("metadata.finalizers", "refused: no Lockstep controller would remove them; remove them")
	}
	const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
	annotations := m.Annotations
	if _, ok := annotations[lastApplied]; ok {
		annotations = cloneWithout(annotations, lastApplied)
		c.warn("annotation %s dropped: it records the Kubeflow object", lastApplied)
	}
	return metav1.ObjectMeta{
		Name: m.Name, GenerateName: m.GenerateName, Namespace: m.Namespace,
		Labels: m.Labels, Annotations: annotations,
	}
}

func (c *converter) replicas(specs kfReplicaSpecs, out *v1alpha1.TrainingJobSpec) {
	field := "spec." + c.kind.replicasField
	if len(specs) == 0 {
		c.refuse(field, "required: give at least one replica spec")
		return
	}
	valid := v1alpha1.FrameworkRoles(c.kind.framework)
	out.ReplicaSpecs = map[v1alpha1.ReplicaType]v1alpha1.ReplicaSpec{}
	for _, key := range slices.Sorted(maps.Keys(specs)) {
		path := field + "." + key
		// Kubeflow accepts role keys in any case (worker, WORKER).
		i := slices.IndexFunc(valid, func(r v1alpha1.ReplicaType) bool { return strings.EqualFold(string(r), key) })
		if i < 0 {
			c.refuse(path, "%s has no role %q; its roles are %v", strings.SplitN(c.source, " ", 2)[0], key, valid)
			continue
		}
		role := valid[i]
		if _, dup := out.ReplicaSpecs[role]; dup {
			c.refuse(path, "role %s is given twice (role names are case-insensitive)", role)
			continue
		}
		src := specs[key]
		if src == nil {
			c.refuse(path, "empty replica spec")
			continue
		}
		spec := v1alpha1.ReplicaSpec{Replicas: src.Replicas, Template: src.Template}
		// mpi-operator defaults Workers to 0 replicas, Lockstep to 1: keep
		// the job's meaning by writing Kubeflow's default.
		if spec.Replicas == nil && c.kind.framework == v1alpha1.FrameworkMPI && role == v1alpha1.ReplicaWorker {
			spec.Replicas = ptr.To[int32](0)
		}
		switch p := v1alpha1.RestartPolicy(src.RestartPolicy); p {
		case "", v1alpha1.RestartAlways, v1alpha1.RestartOnFailure, v1alpha1.RestartNever, v1alpha1.RestartExitCode:
			// Unset keeps Kubeflow's per-framework default, which is also
			// Lockstep's (v1alpha1.DefaultRestartPolicy).
			spec.RestartPolicy = p
		default:
			c.refuse(path+".restartPolicy", "unsupported value %q: use Always, OnFailure, Never or ExitCode", p)
		}
		out.ReplicaSpecs[role] = spec
	}
}

func (c *converter) runPolicy(src *kfRunPolicy) *v1alpha1.RunPolicy {
	if src == nil {
		return nil
	}
	out := &v1alpha1.RunPolicy{
		TTLSecondsAfterFinished: src.TTLSecondsAfterFinished,
		ActiveDeadlineSeconds:   src.ActiveDeadlineSeconds,
		BackoffLimit:            src.BackoffLimit,
		Suspend:                 src.Suspend,
	}
	if p := src.CleanPodPolicy; p != nil {
		switch v := v1alpha1.CleanPodPolicy(*p); v {
		case v1alpha1.CleanPodPolicyAll, v1alpha1.CleanPodPolicyRunning, v1alpha1.CleanPodPolicyNone:
			out.CleanPodPolicy = &v
		default:
			c.refuse("spec.runPolicy.cleanPodPolicy", "unsupported value %q: use All, Running or None", v)
		}
	}
	if m := src.ManagedBy; m != nil {
		if *m == c.kind.operator {
			c.warn("spec.runPolicy.managedBy %q dropped: Lockstep's controller manages the TrainingJob", *m)
		} else {
			c.refuse("spec.runPolicy.managedBy", "no TrainingJob equivalent: the job is delegated to %q, and Lockstep cannot hand a TrainingJob to another controller", *m)
		}
	}
	if sp := src.SchedulingPolicy; sp != nil {
		if len(sp.MinResources) > 0 {
			c.refuse("spec.runPolicy.schedulingPolicy.minResources", "no TrainingJob equivalent: Lockstep computes the gang's resources from the pod templates; remove it")
		}
		out.SchedulingPolicy = &v1alpha1.SchedulingPolicy{
			MinAvailable:           sp.MinAvailable,
			PriorityClass:          sp.PriorityClass,
			Queue:                  sp.Queue,
			ScheduleTimeoutSeconds: sp.ScheduleTimeoutSeconds,
		}
	}
	return out
}

func (c *converter) pytorch(src *pytorchJobSpec, out *v1alpha1.TrainingJobSpec) {
	out.NprocPerNode = src.NprocPerNode
	e := src.ElasticPolicy
	if e == nil {
		return
	}
	const path = "spec.elasticPolicy"
	if n := e.NProcPerNode; n != nil {
		// The deprecated integer field becomes the spec's string field.
		legacy := strconv.Itoa(int(*n))
		switch {
		case out.NprocPerNode == nil:
			out.NprocPerNode = &legacy
		case *out.NprocPerNode != legacy:
			c.refuse(path+".nProcPerNode", "%s conflicts with spec.nprocPerNode %q; keep one", legacy, *out.NprocPerNode)
		}
	}
	policy := &v1alpha1.ElasticPolicy{
		MinReplicas: e.MinReplicas, MaxReplicas: e.MaxReplicas,
		RDZVPort: e.RDZVPort, RDZVHost: e.RDZVHost, RDZVID: e.RDZVID,
		Standalone: e.Standalone, MaxRestarts: e.MaxRestarts,
		// The controller keeps a HorizontalPodAutoscaler on these, as
		// Kubeflow's operator did, scaling the Workers through /scale.
		Metrics: e.Metrics,
	}
	if b := e.RDZVBackend; b != nil {
		switch v := v1alpha1.RDZVBackend(*b); v {
		case v1alpha1.RDZVBackendC10D, v1alpha1.RDZVBackendETCD, v1alpha1.RDZVBackendETCDV2:
			policy.RDZVBackend = &v
		default:
			c.refuse(path+".rdzvBackend", "unsupported value %q: use c10d, etcd or etcd-v2", v)
		}
	}
	for _, kv := range e.RDZVConf {
		policy.RDZVConf = append(policy.RDZVConf, v1alpha1.RDZVConf{Key: kv.Key, Value: kv.Value})
	}
	out.ElasticPolicy = policy
}

func (c *converter) tensorflow(src *tfJobSpec, out *v1alpha1.TrainingJobSpec) {
	if p := src.SuccessPolicy; p != nil {
		switch *p {
		case "":
		case string(v1alpha1.SuccessPolicyAllWorkers):
			out.SuccessPolicy = v1alpha1.SuccessPolicyAllWorkers
		default:
			c.refuse("spec.successPolicy", "unsupported value %q: use AllWorkers, or leave it out", *p)
		}
	}
	if d := src.EnableDynamicWorker; d != nil && *d {
		c.refuse("spec.enableDynamicWorker", "no TrainingJob equivalent: Lockstep writes the full TF_CONFIG cluster, not the sparse one; remove it")
	}
}

func (c *converter) paddle(src *paddleJobSpec, _ *v1alpha1.TrainingJobSpec) {
	if len(src.ElasticPolicy) > 0 {
		c.refuse("spec.elasticPolicy", "no TrainingJob equivalent: Lockstep runs elastic jobs for PyTorch only; remove it to run a fixed-size PaddleJob")
	}
}

func (c *converter) mpi(src *mpiJobSpec, out *v1alpha1.TrainingJobSpec) {
	if p := src.LauncherCreationPolicy; p != nil && *p != "AtStartup" {
		c.refuse("spec.launcherCreationPolicy", "no TrainingJob equivalent for %q: Lockstep starts the gang together and the launcher retries SSH (ConnectionAttempts=10); remove it", *p)
	}
	if src.SlotsPerWorker == nil && src.RunLauncherAsWorker == nil && src.SSHAuthMountPath == nil && src.MPIImplementation == nil {
		return
	}
	policy := &v1alpha1.MPIPolicy{SlotsPerWorker: src.SlotsPerWorker, RunLauncherAsWorker: src.RunLauncherAsWorker}
	if p := src.SSHAuthMountPath; p != nil {
		policy.SSHAuthMountPath = *p
	}
	if impl := src.MPIImplementation; impl != nil {
		switch v := v1alpha1.MPIImplementation(*impl); v {
		case v1alpha1.MPIImplementationOpenMPI, v1alpha1.MPIImplementationIntel, v1alpha1.MPIImplementationMPICH:
			policy.Implementation = v
		default:
			c.refuse("spec.mpiImplementation", "unsupported value %q: use OpenMPI, Intel or MPICH", v)
		}
	}
	out.MPI = policy
}

// mpiV1 maps what MPIJob kubeflow.org/v1 (training-operator) adds to its
// replica specs. That operator reached the workers with kubectl exec (its
// kubexec.sh) and gave a worker without a command "sleep 365d"; Lockstep's
// MPI jobs reach them over SSH as mpi-operator's v2beta1 does, so the
// worker image must run sshd. The converter cannot see into images, so it
// warns.
func (c *converter) mpiV1(src *mpiJobV1Spec, out *v1alpha1.TrainingJobSpec) {
	if src.MainContainer != "" {
		// It only named the container kubexec.sh ran ranks in; over SSH the
		// ranks run wherever sshd does.
		c.warn("spec.mainContainer %q dropped: it chose the container kubectl exec reached; over SSH the ranks run in the container that runs sshd", src.MainContainer)
	}
	if src.SlotsPerWorker != nil {
		out.MPI = &v1alpha1.MPIPolicy{SlotsPerWorker: src.SlotsPerWorker}
	}
	c.warn("MPIJob kubeflow.org/v1 ran its ranks through kubectl exec (kubexec.sh); Lockstep's MPI jobs use SSH as MPIJob v2beta1 does, so the Worker image must start sshd and the Launcher's mpirun reaches the workers over SSH (mpi.sshAuthMountPath, default /root/.ssh)")
	if w := src.MPIReplicaSpecs["Worker"]; w != nil && len(w.Template.Spec.Containers) > 0 && len(w.Template.Spec.Containers[0].Command) == 0 {
		c.warn("the Worker template has no command: Kubeflow's v1 operator ran \"sleep 365d\" there, Lockstep runs the image's entrypoint, which must keep sshd running")
	}
}

// mpiV1CleanPodPolicy carries MPIJob v1's deprecated spec.cleanPodPolicy
// into the run policy, unless runPolicy.cleanPodPolicy says otherwise.
func (c *converter) mpiV1CleanPodPolicy(p *string, rp *v1alpha1.RunPolicy) *v1alpha1.RunPolicy {
	if p == nil || *p == "" {
		return rp
	}
	v := v1alpha1.CleanPodPolicy(*p)
	switch v {
	case v1alpha1.CleanPodPolicyAll, v1alpha1.CleanPodPolicyRunning, v1alpha1.CleanPodPolicyNone:
	default:
		c.refuse("spec.cleanPodPolicy", "unsupported value %q: use All, Running or None", *p)
		return rp
	}
	if rp == nil {
		rp = &v1alpha1.RunPolicy{}
	}
	if rp.CleanPodPolicy != nil && *rp.CleanPodPolicy != v {
		c.refuse("spec.cleanPodPolicy", "%s conflicts with spec.runPolicy.cleanPodPolicy %s; keep one", v, *rp.CleanPodPolicy)
		return rp
	}
	rp.CleanPodPolicy = &v
	return rp
}

// behaviourNotes warns where the TrainingJob behaves differently from the
// Kubeflow job although every field was carried over.
func (c *converter) behaviourNotes(job *v1alpha1.TrainingJob) {
	switch c.kind.framework {
	case v1alpha1.FrameworkPyTorch, v1alpha1.FrameworkMPI, v1alpha1.FrameworkJAX:
		c.warn("a failed pod restarts the whole gang (failurePolicy.restart defaults to Gang for %s); Kubeflow restarted the pod alone. Set failurePolicy.restart: Pod to keep that", c.kind.framework)
	}
	if q, ok := job.Labels[lockstep.LabelKueueQueueName]; ok {
		c.warn("label %s=%s kept: the job is queued in that Kueue LocalQueue and starts once Kueue admits its Workload (Kueue must list %s in integrations.externalFrameworks); without Kueue it waits", lockstep.LabelKueueQueueName, q, lockstep.KueueExternalFramework)
	}
}

// output is job as written: the typed fields, with each pod template
// replaced by the source's template exactly as written.
func (c *converter) output(job *v1alpha1.TrainingJob, src map[string]any) (map[string]any, error) {
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
	if err != nil {
		return nil, fmt.Errorf("encoding the TrainingJob: %w", err)
	}
	delete(out, "status")
	if meta, ok := out["metadata"].(map[string]any); ok && meta["creationTimestamp"] == nil {
		delete(meta, "creationTimestamp")
	}
	srcSpecs, _ := nestedMap(src, "spec", c.kind.replicasField)
	outSpecs, _ := nestedMap(out, "spec", "replicaSpecs")
	for key, v := range srcSpecs {
		role := ""
		for r := range outSpecs {
			if strings.EqualFold(r, key) {
				role = r
			}
		}
		srcSpec, _ := v.(map[string]any)
		outSpec, _ := outSpecs[role].(map[string]any)
		if tmpl, ok := srcSpec["template"]; ok && outSpec != nil {
			outSpec["template"] = runtime.DeepCopyJSONValue(tmpl)
		}
	}
	return out, nil
}

func nestedMap(obj map[string]any, fields ...string) (map[string]any, bool) {
	cur := obj
	for _, f := range fields {
		next, ok := cur[f].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

func nestedString(obj map[string]any, fields ...string) string {
	m, ok := nestedMap(obj, fields[:len(fields)-1]...)
	if !ok {
		return ""
	}
	s, _ := m[fields[len(fields)-1]].(string)
	return s
}

func cloneWithout(m map[string]string, key string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
