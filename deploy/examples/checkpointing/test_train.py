"""Tests of train.py's reporting and resume logic; torch is not needed."""

import datetime
import json
import os
import tempfile
import unittest

import train


class ReportTest(unittest.TestCase):
    def test_report_is_the_protocols_json(self):
        when = datetime.datetime(2026, 12, 4, 20, 0, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
        got = json.loads(train.report(1200, "s3://bucket/run/step-1200", when))
        self.assertEqual(got, {"step": 1200, "time": "2026-12-04T19:00:00Z", "location": "s3://bucket/run/step-1200"})

    def test_negative_step_is_refused(self):
        with self.assertRaises(ValueError):
            train.report(-1, "file:///x")

    def test_termination_message_line(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "termination-log")
            train.write_termination_message(train.report(7, "file:///ckpt/7"), log)
            with open(log) as f:
                line = f.read()
        self.assertTrue(line.startswith("lockstep.dev/checkpoint={"), line)
        self.assertEqual(json.loads(line[len("lockstep.dev/checkpoint="):])["step"], 7)


class ResumeTest(unittest.TestCase):
    def test_first_incarnation_starts_fresh(self):
        self.assertIsNone(train.resume_point({}))

    def test_resume_point(self):
        env = {"LOCKSTEP_RESUME_FROM": "file:///ckpt/inc-0/step-500.pt", "LOCKSTEP_RESUME_STEP": "500"}
        self.assertEqual(train.resume_point(env), ("file:///ckpt/inc-0/step-500.pt", 500))

    def test_bad_step_is_not_a_resume(self):
        with self.assertRaises(ValueError):
            train.resume_point({"LOCKSTEP_RESUME_FROM": "file:///x", "LOCKSTEP_RESUME_STEP": "five"})

    def test_paths_are_per_incarnation_and_round_trip(self):
        a = train.checkpoint_path("/ckpt", "0", 500)
        b = train.checkpoint_path("/ckpt", "1", 500)
        self.assertNotEqual(os.path.dirname(a), os.path.dirname(b))
        self.assertEqual(train.path_of(train.location_of("/ckpt/run a/step-1.pt")), "/ckpt/run a/step-1.pt")
        with self.assertRaises(ValueError):
            train.path_of("s3://bucket/x")


class NoticeTest(unittest.TestCase):
    NOTICE = '{"by":"team/urgent","time":"2026-12-07T10:00:00Z","deadline":"2026-12-07T10:02:00Z"}'

    def write(self, d, annotations):
        path = os.path.join(d, "annotations")
        with open(path, "w") as f:
            # As the kubelet writes metadata.annotations: key="value", the
            # value quoted by Go's %q.
            f.write("\n".join('%s=%s' % (k, json.dumps(v)) for k, v in sorted(annotations.items())))
        return path

    def test_no_file_no_notice(self):
        self.assertIsNone(train.NoticeWatch("/nonexistent/annotations").new_notice())

    def test_a_notice_is_new_once(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.write(d, {"lockstep.dev/preemption-notice": self.NOTICE, "other": 'a "quoted" value'})
            watch = train.NoticeWatch(path)
            n = watch.new_notice()
            self.assertEqual(n["by"], "team/urgent")
            self.assertIsNone(watch.new_notice(), "the same notice is answered once")
            self.write(d, {"other": "x"})
            self.assertIsNone(watch.new_notice())
            self.write(d, {"lockstep.dev/preemption-notice": self.NOTICE})
            self.assertIsNotNone(watch.new_notice(), "a notice withdrawn and given again is new")

    def test_a_malformed_notice_is_none(self):
        for raw in ["", "{", '{"by":"x"}', "[1]"]:
            self.assertIsNone(train.notice_of({"lockstep.dev/preemption-notice": raw}), raw)


class AnnotateTest(unittest.TestCase):
    def test_patch_of_the_pods_own_annotation(self):
        with tempfile.TemporaryDirectory() as d:
            for name, value in {"token": "tok\n", "namespace": "team-a", "ca.crt": ""}.items():
                with open(os.path.join(d, name), "w") as f:
                    f.write(value)
            sent = []
            train.report_to_pod(train.report(3, "file:///ckpt/3"),
                                env={"HOSTNAME": "job-master-0", "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                                sa_dir=d, open_url=sent.append)
        (req,) = sent
        self.assertEqual(req.get_method(), "PATCH")
        self.assertEqual(req.full_url, "https://10.96.0.1:443/api/v1/namespaces/team-a/pods/job-master-0")
        self.assertEqual(req.get_header("Authorization"), "Bearer tok")
        self.assertEqual(req.get_header("Content-type"), "application/merge-patch+json")
        body = json.loads(req.data)
        self.assertEqual(list(body), ["metadata"])
        self.assertEqual(list(body["metadata"]), ["annotations"])
        self.assertEqual(json.loads(body["metadata"]["annotations"]["lockstep.dev/checkpoint"])["step"], 3)

    def test_ipv6_service_host(self):
        req = train.annotate_request("p", "ns", "{}", "fd00::1", "443", "t")
        self.assertEqual(req.full_url, "https://[fd00::1]:443/api/v1/namespaces/ns/pods/p")


if __name__ == "__main__":
    unittest.main()
