package framework

import (
	"bytes"
	"crypto/ed25519"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// fixedRandom is a deterministic key source for tests.
func fixedRandom() *bytes.Reader { return bytes.NewReader(bytes.Repeat([]byte{7}, 1024)) }

func mpiJob(workers int32) *utiltesting.TrainingJobWrapper {
	return makeJob(v1alpha1.FrameworkMPI).
		Role(v1alpha1.ReplicaLauncher, 1, tpl("launcher")).
		Role(v1alpha1.ReplicaWorker, workers, tpl("worker"))
}

func TestMPILauncherEnv(t *testing.T) {
	disableGPUs := vars("NVIDIA_VISIBLE_DEVICES", "", "NVIDIA_DRIVER_CAPABILITIES", "")
	cases := []struct {
		name string
		mpi  *v1alpha1.MPIPolicy
		want []corev1.EnvVar
	}{
		{
			name: "OpenMPI",
			mpi:  &v1alpha1.MPIPolicy{SlotsPerWorker: ptr.To[int32](8)},
			want: append(vars(
				"K_MPI_JOB_ROLE", "launcher",
				"OMPI_MCA_orte_keep_fqdn_hostnames", "true",
				"OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile",
				"OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10",
				"OMPI_MCA_orte_set_default_slots", "8",
			), disableGPUs...),
		},
		{
			name: "Intel MPI",
			mpi:  &v1alpha1.MPIPolicy{Implementation: v1alpha1.MPIImplementationIntel},
			want: append(vars(
				"K_MPI_JOB_ROLE", "launcher",
				"I_MPI_HYDRA_HOST_FILE", "/etc/mpi/hostfile",
				"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10",
				"I_MPI_PERHOST", "1",
			), disableGPUs...),
		},
		{
			name: "MPICH launcher that runs ranks keeps its GPUs",
			mpi:  &v1alpha1.MPIPolicy{Implementation: v1alpha1.MPIImplementationMPICH, RunLauncherAsWorker: ptr.To(true)},
			want: vars(
				"K_MPI_JOB_ROLE", "launcher",
				"HYDRA_HOST_FILE", "/etc/mpi/hostfile",
				"HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10",
			),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := mpiJob(2).With(func(j *v1alpha1.TrainingJob) { j.Spec.MPI = tc.mpi }).DefaultedObj()
			pod := podTemplate(t, NewMPI(fixedRandom()), job, v1alpha1.ReplicaLauncher, 0)
			if diff := cmp.Diff(tc.want, pod.Spec.Containers[0].Env); diff != "" {
				t.Errorf("env (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestMPIPodVolumes(t *testing.T) {
	sshItems := []corev1.KeyToPath{
		{Key: "ssh-privatekey", Path: "id_rsa"},
		{Key: "ssh-publickey", Path: "id_rsa.pub"},
		{Key: "ssh-publickey", Path: "authorized_keys"},
	}
	job := mpiJob(2).DefaultedObj()
	launcher := podTemplate(t, NewMPI(fixedRandom()), job, v1alpha1.ReplicaLauncher, 0)
	wantVolumes := []corev1.Volume{
		{Name: "mpi-job-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "train-config"},
			Items:                []corev1.KeyToPath{{Key: "hostfile", Path: "hostfile", Mode: ptr.To[int32](0o444)}},
		}}},
		{Name: "ssh-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "train-ssh", DefaultMode: ptr.To[int32](0o600), Items: sshItems,
		}}},
	}
	if diff := cmp.Diff(wantVolumes, launcher.Spec.Volumes); diff != "" {
		t.Errorf("launcher volumes (-want,+got):\n%s", diff)
	}
	wantMounts := []corev1.VolumeMount{{Name: "mpi-job-config", MountPath: "/etc/mpi"}, {Name: "ssh-auth", MountPath: "/root/.ssh"}}
	if diff := cmp.Diff(wantMounts, launcher.Spec.Containers[0].VolumeMounts); diff != "" {
		t.Errorf("launcher mounts (-want,+got):\n%s", diff)
	}
	if launcher.Spec.Hostname != "train-launcher-0" {
		t.Errorf("launcher hostname %q, want train-launcher-0", launcher.Spec.Hostname)
	}

	// Workers run sshd unless they say otherwise; a key outside /root/.ssh
	// keeps the Secret's default mode.
	job = mpiJob(2).With(func(j *v1alpha1.TrainingJob) {
		j.Spec.MPI = &v1alpha1.MPIPolicy{SSHAuthMountPath: "/home/mpiuser/.ssh"}
	}).DefaultedObj()
	worker := podTemplate(t, NewMPI(fixedRandom()), job, v1alpha1.ReplicaWorker, 1)
	c := worker.Spec.Containers[0]
	if diff := cmp.Diff([]string{"/usr/sbin/sshd", "-De"}, c.Command); diff != "" {
		t.Errorf("worker command (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(vars("K_MPI_JOB_ROLE", "worker"), c.Env); diff != "" {
		t.Errorf("worker env (-want,+got):\n%s", diff)
	}
	wantVolumes = []corev1.Volume{{Name: "ssh-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: "train-ssh", Items: sshItems,
	}}}}
	if diff := cmp.Diff(wantVolumes, worker.Spec.Volumes); diff != "" {
		t.Errorf("worker volumes (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.VolumeMount{{Name: "ssh-auth", MountPath: "/home/mpiuser/.ssh"}}, c.VolumeMounts); diff != "" {
		t.Errorf("worker mounts (-want,+got):\n%s", diff)
	}
}

func TestMPIHostfile(t *testing.T) {
	cases := []struct {
		name string
		mpi  *v1alpha1.MPIPolicy
		want string
	}{
		{
			name: "OpenMPI",
			mpi:  &v1alpha1.MPIPolicy{SlotsPerWorker: ptr.To[int32](8)},
			want: "train-worker-0.train.ml.svc slots=8\ntrain-worker-1.train.ml.svc slots=8\n",
		},
		{
			name: "Intel",
			mpi:  &v1alpha1.MPIPolicy{Implementation: v1alpha1.MPIImplementationIntel, SlotsPerWorker: ptr.To[int32](4)},
			want: "train-worker-0.train.ml.svc:4\ntrain-worker-1.train.ml.svc:4\n",
		},
		{
			name: "launcher runs ranks too",
			mpi:  &v1alpha1.MPIPolicy{RunLauncherAsWorker: ptr.To(true)},
			want: "train-launcher-0.train.ml.svc slots=1\ntrain-worker-0.train.ml.svc slots=1\ntrain-worker-1.train.ml.svc slots=1\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := mpiJob(2).With(func(j *v1alpha1.TrainingJob) { j.Spec.MPI = tc.mpi }).DefaultedObj()
			if diff := cmp.Diff(tc.want, NewMPI(fixedRandom()).Hostfile(job)); diff != "" {
				t.Errorf("hostfile (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestMPIAuxObjects(t *testing.T) {
	job := mpiJob(2).DefaultedObj()
	objs, err := NewMPI(fixedRandom()).AuxObjects(job)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("%d objects, want the hostfile ConfigMap and the SSH Secret", len(objs))
	}
	cm, ok := objs[0].Object.(*corev1.ConfigMap)
	if !ok || cm.Name != "train-config" || cm.Namespace != "ml" || objs[0].CreateOnly {
		t.Errorf("first object %T %s/%s (create only %v), want ConfigMap ml/train-config, updatable", objs[0].Object, cm.Namespace, cm.Name, objs[0].CreateOnly)
	}
	secret, ok := objs[1].Object.(*corev1.Secret)
	if !ok || secret.Name != "train-ssh" || secret.Type != corev1.SecretTypeSSHAuth || !objs[1].CreateOnly {
		t.Fatalf("second object %T, want the create-only ssh-auth Secret ml/train-ssh", objs[1].Object)
	}
	// The two halves belong together and are what OpenSSH reads.
	private, err := ssh.ParseRawPrivateKey(secret.Data["ssh-privatekey"])
	if err != nil {
		t.Fatalf("private key does not parse: %v", err)
	}
	key, ok := private.(*ed25519.PrivateKey)
	if !ok {
		t.Fatalf("private key is %T, want ed25519", private)
	}
	public, _, _, _, err := ssh.ParseAuthorizedKey(secret.Data["ssh-publickey"])
	if err != nil {
		t.Fatalf("public key is not an authorized_keys line: %v", err)
	}
	derived, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(derived.Marshal(), public.Marshal()) {
		t.Error("public key does not match the private key")
	}
}
