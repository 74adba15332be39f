#!/usr/bin/env python3
"""Shows that tests/deploy/check_manifests.py catches the defects it names.

Each test copies the files the check reads (deploy/, CMakeLists.txt) into a
scratch repository, breaks one thing the way a careless edit would, and
expects the check to fail with a message naming it; the untouched copy must
pass.
"""

import os
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import check_manifests  # noqa: E402

BASE = "deploy/k8s/base/deployment.yaml"
GPU_PATCH = "deploy/k8s/overlays/gpu/sidecar-gpu.yaml"


class CheckManifestsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="entrokv-manifests-")
        shutil.copytree(os.path.join(ROOT, "deploy"), os.path.join(self.tmp, "deploy"),
                        ignore=shutil.ignore_patterns(".rootfs"))
        shutil.copy(os.path.join(ROOT, "CMakeLists.txt"), self.tmp)
        shutil.copy(os.path.join(ROOT, "Dockerfile"), self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    # Story helpers.
    def edit(self, path, old, new, count=1):
        full = os.path.join(self.tmp, path)
        with open(full) as f:
            text = f.read()
        self.assertIn(old, text, f"{path} no longer contains {old!r}: update this test")
        with open(full, "w") as f:
            f.write(text.replace(old, new, count))

    def errors(self):
        return check_manifests.Checker(self.tmp).run()

    def assertFlags(self, pattern):
        errors = self.errors()
        self.assertTrue(any(re.search(pattern, e) for e in errors),
                        f"no error matching {pattern!r} in {errors}")

    # Scenarios.
    def test_untouched_copy_passes(self):
        self.assertEqual(self.errors(), [])

    def test_sidecar_without_restart_policy_always(self):
        self.edit(BASE, "restartPolicy: Always", "restartPolicy: OnFailure")
        self.assertFlags(r"restartPolicy is not Always")

    def test_probe_on_another_port(self):
        self.edit(BASE, "readinessProbe:\n            grpc:\n              port: 8081",
                  "readinessProbe:\n            grpc:\n              port: 50051")
        self.assertFlags(r"readinessProbe probes port 50051")

    def test_api_on_the_pod_ip(self):
        self.edit(BASE, "--listen=unix:/run/entrokv/entrokv.sock",
                  "--listen=unix:/run/entrokv/entrokv.sock,0.0.0.0:50051")
        self.assertFlags(r"unix socket only")

    def test_engine_without_the_socket_volume(self):
        self.edit(BASE, "          volumeMounts:\n            - name: entrokv-socket\n"
                  "              mountPath: /run/entrokv\n          resources:\n"
                  "            requests:\n              cpu: \"8\"",
                  "          resources:\n            requests:\n              cpu: \"8\"")
        self.assertFlags(r"container engine does not mount the socket volume")

    def test_service_account_token_mounted(self):
        self.edit(BASE, "automountServiceAccountToken: false",
                  "automountServiceAccountToken: true")
        self.assertFlags(r"automountServiceAccountToken is not false")

    def test_writable_root_filesystem(self):
        self.edit(BASE, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false")
        self.assertFlags(r"readOnlyRootFilesystem is not True")

    def test_burstable_qos(self):
        self.edit(BASE, "            limits:\n              cpu: \"2\"",
                  "            limits:\n              cpu: \"4\"")
        self.assertFlags(r"container entrokv: cpu request 2 != limit 4")

    def test_memory_limit_below_the_doubling_headroom(self):
        self.edit(BASE, "--max_bytes=3221225472", "--max_bytes=6442450944")
        self.assertFlags(r"memory limit 7680 Mi is below 2 x --max_bytes")

    def test_network_policy_missing(self):
        os.remove(os.path.join(self.tmp, "deploy/k8s/base/networkpolicy.yaml"))
        self.assertFlags(r"resource networkpolicy.yaml does not exist")
        self.assertFlags(r"no NetworkPolicy")

    def test_network_policy_admits_the_api_port(self):
        self.edit("deploy/k8s/base/networkpolicy.yaml", "port: 8000", "port: 50051")
        self.assertFlags(r"admits port 50051")

    def test_image_tag_not_built(self):
        self.edit("deploy/k8s/overlays/gpu/kustomization.yaml", "newTag: 0.1.0",
                  "newTag: latest")
        self.assertFlags(r"entrokv image .*entrokv-cuda:latest is not")

    def test_gpu_overlay_without_toleration(self):
        self.edit(GPU_PATCH, "key: nvidia.com/gpu", "key: example.com/gpu")
        self.assertFlags(r"no nvidia.com/gpu toleration")

    def test_dangling_service_reference(self):
        self.edit(BASE, "  replicas: 1\n", "  replicas: 1\n  serviceName: entrokv\n")
        self.assertFlags(r"names Service entrokv, which is not defined")

    def test_link_outside_the_repository(self):
        with open(os.path.join(self.tmp, "deploy/README.md"), "a") as f:
            # A link that climbs out of the checkout (the checker must flag it).
            f.write("\nSee [the notes](../../../elsewhere/NOTES.md).\n")
        self.assertFlags(r"outside the repository")

    def test_broken_yaml(self):
        with open(os.path.join(self.tmp, "deploy/k8s/base/networkpolicy.yaml"), "a") as f:
            f.write("\n  - : [unclosed\n")
        self.assertFlags(r"does not parse")


if __name__ == "__main__":
    unittest.main(verbosity=1)
