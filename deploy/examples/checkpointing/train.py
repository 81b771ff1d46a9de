"""A PyTorch trainer that checkpoints, tells Lockstep, and resumes.

It needs no Lockstep library: the protocol (docs/controller.md,
"Checkpoints") is an annotation on the rank's own pod, or a line of its
termination message, and two environment variables.

  * Every --every steps, and when the pod is told to stop (SIGTERM: a
    preemption, a drain, a restart of the gang), the ranks agree on a step,
    rank 0 saves the model and optimizer with torch.save under
    <--dir>/inc-<LOCKSTEP_INCARNATION>/ (so that a rank of an earlier
    incarnation still running on a partitioned node never writes over this
    one's), and reports it: it patches its own pod's lockstep.dev/checkpoint
    annotation with the ServiceAccount token the kubelet mounts (the job's
    Role allows that and nothing else), or, on its way out, writes the
    report to its termination message, which needs no permission at all.
  * When the job asked for notice (runPolicy.preemptionNoticeSeconds), the
    scheduler (before a preemption) or the controller (before a suspension,
    Kueue's eviction included) annotates the pods with
    lockstep.dev/preemption-notice and waits for a fresh report. The pods
    mount their annotations through a downward-API volume, which the
    kubelet keeps current; rank 0 reads it every --notice-every steps, and
    a new notice makes every rank checkpoint and report at once, then train
    on until the pods are deleted (SIGTERM) or the notice is withdrawn.
  * A new incarnation finds the last report in LOCKSTEP_RESUME_FROM and
    LOCKSTEP_RESUME_STEP and loads it.

The logic around torch (reports, resume points, paths, the API request) is
plain Python, so test_train.py runs it without torch.
"""

import argparse
import ast
import datetime
import json
import os
import signal
import ssl
import sys
import urllib.parse
import urllib.request

ANNOTATION = "lockstep.dev/checkpoint"
MESSAGE_PREFIX = ANNOTATION + "="
NOTICE_ANNOTATION = "lockstep.dev/preemption-notice"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TERMINATION_LOG = "/dev/termination-log"
ANNOTATIONS_FILE = "/etc/lockstep/annotations"


def read_annotations(path=ANNOTATIONS_FILE):
    """The pod's annotations from a downward-API file (metadata.annotations):
    one key="value" line each, the value quoted as Go's %q quotes it. A
    missing file is no annotations."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, quoted = line.partition("=")
        if not sep or not quoted.startswith('"'):
            continue
        # Go's %q escapes are a subset of a Python string literal's.
        out[key] = ast.literal_eval(quoted)
    return out


def notice_of(annotations):
    """The preemption notice in annotations: {"by", "time", "deadline"},
    or None when there is none (or it is not one)."""
    raw = annotations.get(NOTICE_ANNOTATION)
    if not raw:
        return None
    try:
        n = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(n, dict) or not all(isinstance(n.get(k), str) and n[k] for k in ("by", "time", "deadline")):
        return None
    return n


class NoticeWatch:
    """Says once per notice that it is new: a notice is answered with one
    checkpoint, and training goes on until the pods are deleted."""

    def __init__(self, path=ANNOTATIONS_FILE):
        self.path = path
        self.answered = None

    def new_notice(self):
        n = notice_of(read_annotations(self.path))
        if n is None:
            # Withdrawn (a suspended job resumed in time): a later one is new.
            self.answered = None
            return None
        if n["time"] == self.answered:
            return None
        self.answered = n["time"]
        return n


def report(step, location, when=None):
    """The report, as lockstep.ParseCheckpoint reads it."""
    if step < 0:
        raise ValueError("step must be at least 0")
    when = when or datetime.datetime.now(datetime.timezone.utc)
    return json.dumps({
        "step": int(step),
        "time": when.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z"),
        "location": location,
    }, separators=(",", ":"))


def resume_point(env=None):
    """(location, step) of the checkpoint to resume from, or None."""
    env = os.environ if env is None else env
    location = env.get("LOCKSTEP_RESUME_FROM", "")
    if not location:
        return None
    step = env.get("LOCKSTEP_RESUME_STEP", "")
    if not step.isdigit():
        raise ValueError("LOCKSTEP_RESUME_STEP=%r is not a step" % step)
    return location, int(step)


def checkpoint_path(root, incarnation, step):
    """Where incarnation saves step: apart from every other incarnation."""
    return os.path.join(root, "inc-%s" % incarnation, "step-%d.pt" % step)


def location_of(path):
    """The file:// URI of a local (shared-volume) path."""
    return "file://" + urllib.parse.quote(os.path.abspath(path))


def path_of(location):
    """The local path of a file:// location this trainer can load."""
    u = urllib.parse.urlparse(location)
    if u.scheme != "file" or u.netloc not in ("", "localhost"):
        raise ValueError("cannot load %s: only file:// locations" % location)
    return urllib.parse.unquote(u.path)


def annotate_request(pod, namespace, body, host, port, token):
    """The merge patch of the pod's own annotation, as an HTTP request."""
    hostport = "[%s]" % host if ":" in host else host
    if port:
        hostport += ":" + str(port)
    url = "https://%s/api/v1/namespaces/%s/pods/%s" % (
        hostport, urllib.parse.quote(namespace), urllib.parse.quote(pod))
    data = json.dumps({"metadata": {"annotations": {ANNOTATION: body}}}).encode()
    return urllib.request.Request(url, data=data, method="PATCH", headers={
        "Authorization": "Bearer " + token,
        "Content-Type": "application/merge-patch+json",
        "Accept": "application/json",
    })


def report_to_pod(body, env=None, sa_dir=SERVICE_ACCOUNT, open_url=None):
    """Patches this pod's annotation with the report. The pod's name is its
    hostname (the controller sets both), its namespace and token are the
    mounted ServiceAccount's."""
    env = os.environ if env is None else env
    with open(os.path.join(sa_dir, "token")) as f:
        token = f.read().strip()
    with open(os.path.join(sa_dir, "namespace")) as f:
        namespace = f.read().strip()
    req = annotate_request(env["HOSTNAME"], namespace, body,
                           env["KUBERNETES_SERVICE_HOST"], env.get("KUBERNETES_SERVICE_PORT", "443"), token)
    if open_url is None:
        ctx = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
        return urllib.request.urlopen(req, context=ctx, timeout=10)
    return open_url(req)


def write_termination_message(body, path=TERMINATION_LOG):
    """The report made while exiting: the kubelet keeps the file as the
    container's termination message, which the controller reads."""
    with open(path, "a") as f:
        f.write(MESSAGE_PREFIX + body + "\n")


class StopFlag:
    """Set by SIGTERM: checkpoint at the next step, then exit."""

    def __init__(self):
        self.set = False

    def __call__(self, signum, frame):
        self.set = True


def train(args):
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if torch.cuda.is_available() else torch.device("cpu")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    point = resume_point()
    if point:
        state = torch.load(path_of(point[0]), map_location=device)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        if rank == 0:
            print("resumed from %s at step %d" % point, flush=True)
    stop = StopFlag()
    signal.signal(signal.SIGTERM, stop)
    watch = NoticeWatch(args.annotations)
    incarnation = os.environ.get("LOCKSTEP_INCARNATION", "0")
    while step < args.steps:
        x = torch.randn(64, 1024, device=device)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        noticed = rank == 0 and step % args.notice_every == 0 and watch.new_notice() is not None
        if noticed:
            print("preemption notice at step %d: checkpointing now" % step, flush=True)
        # Every rank stops, or checkpoints, at the same step: one that saw
        # SIGTERM, or rank 0 that saw a notice, tells all.
        flag = torch.tensor([1.0 if stop.set else 0.0, 1.0 if noticed else 0.0], device=device)
        dist.all_reduce(flag)
        stopping, noticed = flag[0].item() > 0, flag[1].item() > 0
        if step % args.every == 0 or stopping or noticed or step == args.steps:
            dist.barrier()
            if rank == 0:
                path = checkpoint_path(args.dir, incarnation, step)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}, path + ".tmp")
                os.replace(path + ".tmp", path)
                body = report(step, location_of(path))
                if stopping:
                    write_termination_message(body)
                else:
                    try:
                        report_to_pod(body)
                    except Exception as e:  # training goes on; the next report may pass
                        print("checkpoint report failed: %s" % e, file=sys.stderr, flush=True)
            dist.barrier()
        if stopping:
            return 143
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="/ckpt", help="shared checkpoint directory")
    p.add_argument("--every", type=int, default=500, help="checkpoint every this many steps")
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--annotations", default=ANNOTATIONS_FILE,
                   help="the pod's annotations, a downward-API volume file")
    p.add_argument("--notice-every", type=int, default=10,
                   help="look for a preemption notice every this many steps")
    p.add_argument("--print-notice", metavar="FILE",
                   help="print the notice in a downward-API annotations file and exit (no torch needed)")
    p.add_argument("--print-report", nargs=2, metavar=("STEP", "PATH"),
                   help="print the report for a checkpoint and exit (no torch needed)")
    args = p.parse_args(argv)
    if args.print_notice:
        print(json.dumps(notice_of(read_annotations(args.print_notice))))
        return 0
    if args.print_report:
        print(report(int(args.print_report[0]), location_of(args.print_report[1])))
        return 0
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
