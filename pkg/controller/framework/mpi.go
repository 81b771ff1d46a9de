package framework

import (
	"crypto/ed25519"
	"encoding/pem"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// mpi-operator's names (v2beta1 pkg/controller/mpi_job_controller.go).
const (
	mpiConfigSuffix     = "-config"
	mpiConfigVolume     = "mpi-job-config"
	mpiConfigMountPath  = "/etc/mpi"
	mpiHostfileKey      = "hostfile"
	mpiSSHSecretSuffix  = "-ssh"
	mpiSSHVolume        = "ssh-auth"
	mpiRootSSHPath      = "/root/.ssh"
	mpiSSHPublicKeyKey  = "ssh-publickey"
	mpiSSHPrivateKey    = "id_rsa"
	mpiSSHPublicKey     = "id_rsa.pub"
	mpiSSHAuthorizedKey = "authorized_keys"
	mpiSSHConnectArgs   = "-o ConnectionAttempts=10"
)

// MPI runs mpirun jobs: one Launcher that starts ranks over SSH on Workers
// running sshd, as mpi-operator's MPIJob v2beta1.
//
// The Launcher's main container (the first) gets:
//
//	K_MPI_JOB_ROLE=launcher
//	OpenMPI: OMPI_MCA_orte_keep_fqdn_hostnames=true
//	         OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile
//	         OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10
//	         OMPI_MCA_orte_set_default_slots=<slotsPerWorker>
//	Intel:   I_MPI_HYDRA_HOST_FILE=/etc/mpi/hostfile
//	         I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS=-o ConnectionAttempts=10
//	         I_MPI_PERHOST=<slotsPerWorker>
//	MPICH:   HYDRA_HOST_FILE=/etc/mpi/hostfile
//	         HYDRA_LAUNCH_EXTRA_ARGS=-o ConnectionAttempts=10
//	NVIDIA_VISIBLE_DEVICES= and NVIDIA_DRIVER_CAPABILITIES= (empty), so a
//	launcher that runs no ranks holds no GPU, unless runLauncherAsWorker
//
// and the ConfigMap <job>-config mounted at /etc/mpi, whose hostfile lists
// every Worker ("<address> slots=N" for OpenMPI, "<address>:N" otherwise),
// the Launcher first under runLauncherAsWorker. Workers get
// K_MPI_JOB_ROLE=worker and, without a command of their own,
// "/usr/sbin/sshd -De". Every pod mounts the Secret <job>-ssh at
// sshAuthMountPath as id_rsa, id_rsa.pub and authorized_keys (mode 0600
// under /root/.ssh, where sshd checks it).
//
// mpi-operator's discover_hosts.sh (Horovod elastic) is not written: it
// lists running pods, which a pure adapter cannot see.
type MPI struct {
	random io.Reader
}

var _ Adapter = (*MPI)(nil)

// NewMPI returns the MPI adapter. random feeds SSH key generation:
// crypto/rand.Reader in production, a fixed stream in tests.
func NewMPI(random io.Reader) *MPI { return &MPI{random: random} }

func (*MPI) Framework() v1alpha1.Framework { return v1alpha1.FrameworkMPI }

// Roles puts Workers first: the Launcher connects to them at once.
func (*MPI) Roles() []v1alpha1.ReplicaType {
	return []v1alpha1.ReplicaType{v1alpha1.ReplicaWorker, v1alpha1.ReplicaLauncher}
}

// DefaultRestartScope is Gang: mpirun aborts the whole world when a rank
// dies, and a new Launcher needs every Worker's sshd.
func (*MPI) DefaultRestartScope() v1alpha1.RestartScope { return v1alpha1.RestartScopeGang }

func (m *MPI) PodTemplate(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (*corev1.PodTemplateSpec, error) {
	inc := NameIncarnation(m, job)
	pod, err := basePod(job, role, index, inc)
	if err != nil {
		return nil, err
	}
	policy := mpiPolicy(job)
	main := &pod.Spec.Containers[0] // mpi-operator's main container
	switch role {
	case v1alpha1.ReplicaLauncher:
		setEnv(main, env("K_MPI_JOB_ROLE", "launcher"))
		setEnv(main, mpiLauncherEnv(policy)...)
		if !*policy.RunLauncherAsWorker {
			setEnv(main, env("NVIDIA_VISIBLE_DEVICES", ""), env("NVIDIA_DRIVER_CAPABILITIES", ""))
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name: mpiConfigVolume,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: job.Name + mpiConfigSuffix},
				Items:                []corev1.KeyToPath{{Key: mpiHostfileKey, Path: mpiHostfileKey, Mode: ptr.To[int32](0o444)}},
			}},
		})
		main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: mpiConfigVolume, MountPath: mpiConfigMountPath})
	case v1alpha1.ReplicaWorker:
		setEnv(main, env("K_MPI_JOB_ROLE", "worker"))
		if len(main.Command) == 0 && len(main.Args) == 0 {
			main.Command = []string{"/usr/sbin/sshd", "-De"}
		}
	default:
		return nil, fmt.Errorf("job %s/%s: MPI has no role %s", job.Namespace, job.Name, role)
	}

	var mode *int32
	if policy.SSHAuthMountPath == mpiRootSSHPath {
		mode = ptr.To[int32](0o600)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
		Name: mpiSSHVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  job.Name + mpiSSHSecretSuffix,
			DefaultMode: mode,
			Items: []corev1.KeyToPath{
				{Key: corev1.SSHAuthPrivateKey, Path: mpiSSHPrivateKey},
				{Key: mpiSSHPublicKeyKey, Path: mpiSSHPublicKey},
				{Key: mpiSSHPublicKeyKey, Path: mpiSSHAuthorizedKey},
			},
		}},
	})
	main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: mpiSSHVolume, MountPath: policy.SSHAuthMountPath})
	return pod, nil
}

func mpiLauncherEnv(p *v1alpha1.MPIPolicy) []corev1.EnvVar {
	hostfile := mpiConfigMountPath + "/" + mpiHostfileKey
	slots := itoa(*p.SlotsPerWorker)
	switch p.Implementation {
	case v1alpha1.MPIImplementationIntel:
		return []corev1.EnvVar{
			env("I_MPI_HYDRA_HOST_FILE", hostfile),
			env("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", mpiSSHConnectArgs),
			env("I_MPI_PERHOST", slots),
		}
	case v1alpha1.MPIImplementationMPICH:
		return []corev1.EnvVar{
			env("HYDRA_HOST_FILE", hostfile),
			env("HYDRA_LAUNCH_EXTRA_ARGS", mpiSSHConnectArgs),
		}
	}
	return []corev1.EnvVar{
		env("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
		env("OMPI_MCA_orte_default_hostfile", hostfile),
		env("OMPI_MCA_plm_rsh_args", mpiSSHConnectArgs),
		env("OMPI_MCA_orte_set_default_slots", slots),
	}
}

// mpiPolicy is the job's MPI policy with defaults filled, so the adapter
// does not depend on the caller having defaulted the job.
func mpiPolicy(job *v1alpha1.TrainingJob) *v1alpha1.MPIPolicy {
	p := &v1alpha1.MPIPolicy{}
	if job.Spec.MPI != nil {
		p = job.Spec.MPI.DeepCopy()
	}
	if p.SlotsPerWorker == nil {
		p.SlotsPerWorker = ptr.To[int32](1)
	}
	if p.SSHAuthMountPath == "" {
		p.SSHAuthMountPath = mpiRootSSHPath
	}
	if p.Implementation == "" {
		p.Implementation = v1alpha1.MPIImplementationOpenMPI
	}
	if p.RunLauncherAsWorker == nil {
		p.RunLauncherAsWorker = ptr.To(false)
	}
	return p
}

// Rank is the pod's line in the hostfile, which is the order mpirun fills
// ranks in (by slot: a host's slotsPerWorker ranks are consecutive): Worker
// i → i, after the Launcher under runLauncherAsWorker. A Launcher that runs
// no ranks is none.
func (*MPI) Rank(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (int32, bool) {
	asWorker := *mpiPolicy(job).RunLauncherAsWorker
	switch {
	case role == v1alpha1.ReplicaWorker && asWorker:
		return index + 1, true
	case role == v1alpha1.ReplicaWorker:
		return index, true
	case role == v1alpha1.ReplicaLauncher && asWorker:
		return index, true
	}
	return 0, false
}

// Hostfile is the hostfile the Launcher reads.
func (m *MPI) Hostfile(job *v1alpha1.TrainingJob) string {
	p := mpiPolicy(job)
	inc := NameIncarnation(m, job)
	var b strings.Builder
	line := func(host string) {
		if p.Implementation == v1alpha1.MPIImplementationOpenMPI {
			fmt.Fprintf(&b, "%s slots=%d\n", host, *p.SlotsPerWorker)
		} else {
			fmt.Fprintf(&b, "%s:%d\n", host, *p.SlotsPerWorker)
		}
	}
	if *p.RunLauncherAsWorker {
		line(PodAddress(job, v1alpha1.ReplicaLauncher, 0, inc))
	}
	for i := range replicasOf(job, v1alpha1.ReplicaWorker) {
		line(PodAddress(job, v1alpha1.ReplicaWorker, i, inc))
	}
	return b.String()
}

// AuxObjects returns the hostfile ConfigMap and the SSH key Secret. The
// Secret is CreateOnly: each call makes a new key.
func (m *MPI) AuxObjects(job *v1alpha1.TrainingJob) ([]AuxObject, error) {
	hostfile := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + mpiConfigSuffix, Namespace: job.Namespace},
		Data:       map[string]string{mpiHostfileKey: m.Hostfile(job)},
	}
	secret, err := m.sshSecret(job)
	if err != nil {
		return nil, err
	}
	return []AuxObject{{Object: hostfile}, {Object: secret, CreateOnly: true}}, nil
}

// sshSecret makes an ed25519 key pair in OpenSSH's formats: the private key
// as an "OPENSSH PRIVATE KEY" PEM block, the public key as an
// authorized_keys line.
func (m *MPI) sshSecret(job *v1alpha1.TrainingJob) (*corev1.Secret, error) {
	public, private, err := ed25519.GenerateKey(m.random)
	if err != nil {
		return nil, fmt.Errorf("generating the SSH key of %s/%s: %w", job.Namespace, job.Name, err)
	}
	block, err := ssh.MarshalPrivateKey(private, job.Namespace+"/"+job.Name)
	if err != nil {
		return nil, fmt.Errorf("encoding the SSH key of %s/%s: %w", job.Namespace, job.Name, err)
	}
	sshPublic, err := ssh.NewPublicKey(public)
	if err != nil {
		return nil, fmt.Errorf("encoding the SSH public key of %s/%s: %w", job.Namespace, job.Name, err)
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + mpiSSHSecretSuffix, Namespace: job.Namespace},
		Type:       corev1.SecretTypeSSHAuth,
		Data: map[string][]byte{
			corev1.SSHAuthPrivateKey: pem.EncodeToMemory(block),
			mpiSSHPublicKeyKey:       ssh.MarshalAuthorizedKey(sshPublic),
		},
	}, nil
}

// Outcome: the Launcher decides; Workers run sshd until they are deleted.
func (m *MPI) Outcome(job *v1alpha1.TrainingJob, pods Observed) Outcome {
	return decide(m.Roles(), pods, allSucceeded(job, v1alpha1.ReplicaLauncher))
}
