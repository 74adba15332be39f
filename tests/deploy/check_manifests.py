#!/usr/bin/env python3
"""Checks the shape of the Kubernetes manifests in deploy/k8s.

    tests/deploy/check_manifests.py [--root REPO]

Parses every YAML file under deploy/k8s, follows each kustomization's
resources and patches, renders every overlay the way kustomize does for what
these manifests use (resources, strategic-merge patches that merge lists of
named items by name, the images transformer), and asserts on each rendered
Deployment what deploy/README.md promises:

- entrokv is a native sidecar (an init container with restartPolicy Always);
- its API listens on the unix socket only; startup, readiness and liveness
  probes are gRPC probes on the health port 8081 (--health_listen);
  the metrics port 9464 is named "metrics"; no other port is declared;
- the socket volume is an emptyDir mounted at /run/entrokv in the sidecar and
  in every engine container; the engine's ENTROKV_TARGET names that socket and
  ENTROKV_STEP_DEADLINE_MS is set;
- securityContext: non-root uid 10001, read-only root filesystem, no
  privilege escalation, all capabilities dropped, seccomp RuntimeDefault;
  pod fsGroup 10001 (the socket's group); automountServiceAccountToken false;
- Guaranteed QoS: every container has cpu and memory requests equal to limits
  (and equal requests/limits for any extended resource);
- the sidecar's memory limit covers 2 x --max_bytes + --grpc_memory_bytes +
  512 Mi (key storage grows by doubling);
- a NetworkPolicy selects the pod and admits only the health, metrics and
  engine ports; no object names a Service that is not there;
- the overlays' images are the tags deploy/build-image.sh builds
  (entrokv:VERSION, entrokv-cuda:VERSION, VERSION from CMakeLists.txt);
  the GPU overlay runs --gpu=true with nvidia.com/gpu and a toleration;
- deploy/ links no file outside the repository.

Exits 0 when every check passes, else prints each failure and exits 1.
"""

import argparse
import copy
import os
import re
import sys

import yaml

SOCKET_DIR = "/run/entrokv"
SOCKET = SOCKET_DIR + "/entrokv.sock"
HEALTH_PORT = 8081
METRICS_PORT = 9464
SERVER_UID = 10001
SIDECAR = "entrokv"
OVERHEAD_BYTES = 512 << 20
OVERLAY_IMAGES = {"cpu": "entrokv", "gpu": "entrokv-cuda"}

_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "m": 1e-3,
}


def quantity(value):
    """A Kubernetes quantity ("2", "500m", "8Gi") as a number."""
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value))
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.k8s = os.path.join(self.root, "deploy", "k8s")
        self.errors = []

    def fail(self, where, message):
        self.errors.append(f"{where}: {message}")

    def rel(self, path):
        return os.path.relpath(path, self.root)

    # ---- loading -------------------------------------------------------

    def load(self, path):
        try:
            with open(path) as f:
                return [d for d in yaml.safe_load_all(f) if d is not None]
        except (OSError, yaml.YAMLError) as error:
            self.fail(self.rel(path), f"does not parse: {error}")
            return []

    def build(self, directory, seen=()):
        """Renders a kustomization directory into a list of objects."""
        where = self.rel(os.path.join(directory, "kustomization.yaml"))
        if directory in seen:
            self.fail(where, "resources form a cycle")
            return []
        docs = self.load(os.path.join(directory, "kustomization.yaml"))
        if len(docs) != 1 or not isinstance(docs[0], dict):
            self.fail(where, "want one Kustomization document")
            return []
        kust = docs[0]
        if kust.get("kind") != "Kustomization":
            self.fail(where, "kind is not Kustomization")
        objects = []
        for resource in kust.get("resources", []):
            path = os.path.normpath(os.path.join(directory, resource))
            if not path.startswith(self.root + os.sep):
                self.fail(where, f"resource {resource} is outside the repository")
            elif os.path.isdir(path):
                if os.path.exists(os.path.join(path, "kustomization.yaml")):
                    objects += self.build(path, seen + (directory,))
                else:
                    self.fail(where, f"resource {resource} has no kustomization.yaml")
            elif os.path.isfile(path):
                objects += copy.deepcopy(self.load(path))
            else:
                self.fail(where, f"resource {resource} does not exist")
        for patch in kust.get("patches", []) + [
                {"path": p} for p in kust.get("patchesStrategicMerge", [])]:
            path = os.path.join(directory, patch.get("path", ""))
            if not os.path.isfile(path):
                self.fail(where, f"patch {patch.get('path')} does not exist")
                continue
            for doc in self.load(path):
                target = dict(patch.get("target") or {})
                kind = target.get("kind", doc.get("kind"))
                name = target.get("name", doc.get("metadata", {}).get("name"))
                hits = [o for o in objects if o.get("kind") == kind
                        and o.get("metadata", {}).get("name") == name]
                if not hits:
                    self.fail(where, f"patch {patch['path']} targets {kind}/{name}, "
                              "which the resources do not define")
                for obj in hits:
                    merged = merge(obj, {k: v for k, v in doc.items()
                                         if k not in ("apiVersion", "kind")})
                    obj.clear()
                    obj.update(merged)
        for image in kust.get("images", []):
            for obj in objects:
                for container in pod_containers(obj):
                    if image_name(container.get("image", "")) == image.get("name"):
                        new = image.get("newName", image["name"])
                        tag = image.get("newTag") or image_tag(container["image"])
                        container["image"] = f"{new}:{tag}" if tag else new
        return objects

    # ---- checks ----------------------------------------------------------

    def run(self):
        if not os.path.isdir(self.k8s):
            self.fail("deploy/k8s", "missing")
            return self.errors
        for dirpath, _, files in os.walk(self.k8s):
            for name in sorted(files):
                if name.endswith((".yaml", ".yml")):
                    self.load(os.path.join(dirpath, name))
        version = self.version()
        self.check_build_tags(version)
        self.check_links()
        overlays_dir = os.path.join(self.k8s, "overlays")
        overlays = sorted(os.listdir(overlays_dir)) if os.path.isdir(overlays_dir) else []
        for overlay in OVERLAY_IMAGES:
            if overlay not in overlays:
                self.fail("deploy/k8s/overlays", f"no {overlay} overlay")
        for overlay in overlays:
            objects = self.build(os.path.join(overlays_dir, overlay))
            self.check_objects(f"overlays/{overlay}", overlay, objects, version)
        return self.errors

    def version(self):
        match = re.search(r"project\(entrokv VERSION ([0-9.]+)",
                          read_text(os.path.join(self.root, "CMakeLists.txt")) or "")
        if not match:
            self.fail("CMakeLists.txt", "no project(entrokv VERSION ...)")
            return "?"
        return match.group(1)

    def check_build_tags(self, version):
        script = os.path.join(self.root, "deploy", "build-image.sh")
        dockerfile = os.path.join(self.root, "Dockerfile")
        text = read_text(script)
        if text is None:
            self.fail("deploy/build-image.sh", "missing")
            text = ""
        for name in OVERLAY_IMAGES.values():
            if f"tag={name}:$version" not in text:
                self.fail("deploy/build-image.sh", f"does not tag {name}:$version")
        text = read_text(dockerfile)
        if text is None:
            self.fail("Dockerfile", "missing")
            return
        label = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', text)
        if not label or label.group(1) != version:
            self.fail("Dockerfile", f"image version label is not {version}")
        if "ARG CUDA" not in text:
            self.fail("Dockerfile", "no CUDA build argument")

    def check_links(self):
        deploy = os.path.join(self.root, "deploy")
        for dirpath, _, files in os.walk(deploy):
            for name in files:
                if not name.endswith((".md", ".yaml", ".yml")):
                    continue
                path = os.path.join(dirpath, name)
                text = read_text(path) or ""
                for link in re.findall(r"\]\(([^)#\s]+)", text):
                    if re.match(r"[a-z]+://", link):
                        continue
                    target = os.path.normpath(os.path.join(dirpath, link))
                    if not target.startswith(self.root + os.sep):
                        self.fail(self.rel(path), f"links {link}, outside the repository")
                    elif not os.path.exists(target):
                        self.fail(self.rel(path), f"links {link}, which does not exist")

    def check_objects(self, where, overlay, objects, version):
        deployments = [o for o in objects if o.get("kind") == "Deployment"]
        policies = [o for o in objects if o.get("kind") == "NetworkPolicy"]
        services = {o["metadata"]["name"] for o in objects if o.get("kind") == "Service"}
        if not deployments:
            self.fail(where, "no Deployment")
        if not policies:
            self.fail(where, "no NetworkPolicy")
        for obj in objects:
            for ref in find_keys(obj, "serviceName"):
                if ref not in services:
                    self.fail(where, f"names Service {ref}, which is not defined")
        for deployment in deployments:
            name = f"{where} Deployment/{deployment['metadata']['name']}"
            self.check_deployment(name, overlay, deployment, version)
            labels = deployment["spec"]["template"]["metadata"].get("labels", {})
            engine_ports = {p.get("containerPort")
                            for c in deployment["spec"]["template"]["spec"].get("containers", [])
                            for p in c.get("ports", [])}
            selecting = [p for p in policies
                         if selects(p["spec"].get("podSelector", {}), labels)]
            if policies and not selecting:
                self.fail(name, "no NetworkPolicy selects its pods")
            for policy in selecting:
                self.check_policy(f"{where} NetworkPolicy/{policy['metadata']['name']}",
                                  policy, engine_ports)

    def check_policy(self, where, policy, engine_ports):
        spec = policy["spec"]
        if "Ingress" not in spec.get("policyTypes", []):
            self.fail(where, "policyTypes lacks Ingress")
        allowed = {HEALTH_PORT, METRICS_PORT} | engine_ports
        for rule in spec.get("ingress", []):
            ports = rule.get("ports")
            if not ports:
                self.fail(where, "an ingress rule admits every port")
            for port in ports or []:
                if port.get("port") not in allowed:
                    self.fail(where, f"admits port {port.get('port')}, "
                              f"not one of {sorted(allowed)}")

    def check_deployment(self, where, overlay, deployment, version):
        pod = deployment["spec"]["template"]["spec"]
        if pod.get("automountServiceAccountToken") is not False:
            self.fail(where, "automountServiceAccountToken is not false")
        pod_security = pod.get("securityContext", {})
        if pod_security.get("fsGroup") != SERVER_UID:
            self.fail(where, f"pod fsGroup is not {SERVER_UID} (the socket's group)")
        sidecars = [c for c in pod.get("initContainers", []) if c.get("name") == SIDECAR]
        if len(sidecars) != 1:
            self.fail(where, f"no init container named {SIDECAR}")
            return
        sidecar = sidecars[0]
        engines = pod.get("containers", [])
        if not engines:
            self.fail(where, "no engine container")
        if sidecar.get("restartPolicy") != "Always":
            self.fail(where, "the entrokv init container's restartPolicy is not Always "
                      "(not a native sidecar)")

        # Socket volume.
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = [m for m in sidecar.get("volumeMounts", []) if m.get("mountPath") == SOCKET_DIR]
        if not mounts:
            self.fail(where, f"entrokv does not mount {SOCKET_DIR}")
        else:
            volume = mounts[0]["name"]
            if "emptyDir" not in volumes.get(volume, {}):
                self.fail(where, f"socket volume {volume} is not an emptyDir")
            for engine in engines:
                if not any(m.get("name") == volume and m.get("mountPath") == SOCKET_DIR
                           for m in engine.get("volumeMounts", [])):
                    self.fail(where, f"container {engine.get('name')} does not mount "
                              f"the socket volume at {SOCKET_DIR}")

        # Flags and ports.
        flags = parse_flags(sidecar.get("args", []))
        listen = flags.get("listen", "")
        if not listen or any(not a.startswith("unix:") for a in listen.split(",")):
            self.fail(where, f"--listen={listen}: the API must be on the unix socket only")
        elif SOCKET not in [a[len("unix:"):] for a in listen.split(",")]:
            self.fail(where, f"--listen={listen} is not unix:{SOCKET}")
        if port_of(flags.get("health_listen", "")) != HEALTH_PORT:
            self.fail(where, f"--health_listen is not on port {HEALTH_PORT}")
        if port_of(flags.get("metrics_listen", "")) != METRICS_PORT:
            self.fail(where, f"--metrics_listen is not on port {METRICS_PORT}")
        ports = {p.get("containerPort"): p.get("name") for p in sidecar.get("ports", [])}
        if ports.get(METRICS_PORT) != "metrics":
            self.fail(where, f"no container port {METRICS_PORT} named metrics")
        for port in ports:
            if port not in (HEALTH_PORT, METRICS_PORT):
                self.fail(where, f"entrokv declares port {port}: only {HEALTH_PORT} "
                          f"and {METRICS_PORT} are served on TCP")
        named = {name: port for port, name in ports.items()}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            grpc = sidecar.get(probe, {}).get("grpc")
            if not grpc:
                self.fail(where, f"entrokv has no gRPC {probe}")
                continue
            port = named.get(grpc.get("port"), grpc.get("port"))
            if port != HEALTH_PORT:
                self.fail(where, f"{probe} probes port {grpc.get('port')}, "
                          f"not the health port {HEALTH_PORT}")
        drain = duration_seconds(flags.get("drain_timeout", "10s"))
        if drain >= pod.get("terminationGracePeriodSeconds", 30):
            self.fail(where, "--drain_timeout is not below terminationGracePeriodSeconds")

        # Engine environment.
        for engine in engines:
            env = {e.get("name"): e.get("value") for e in engine.get("env", [])}
            if env.get("ENTROKV_TARGET") != f"unix:{SOCKET}":
                self.fail(where, f"container {engine.get('name')}: ENTROKV_TARGET is not "
                          f"unix:{SOCKET}")
            if not str(env.get("ENTROKV_STEP_DEADLINE_MS", "")).isdigit():
                self.fail(where, f"container {engine.get('name')}: "
                          "ENTROKV_STEP_DEADLINE_MS is not set to milliseconds")

        # Security.
        security = sidecar.get("securityContext", {})
        merged = {**pod_security, **security}
        wants = {"runAsNonRoot": True, "runAsUser": SERVER_UID,
                 "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
        for key, value in wants.items():
            if merged.get(key) != value:
                self.fail(where, f"entrokv securityContext.{key} is not {value}")
        if "ALL" not in security.get("capabilities", {}).get("drop", []):
            self.fail(where, "entrokv does not drop ALL capabilities")
        if merged.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            self.fail(where, "entrokv's seccompProfile is not RuntimeDefault")
        for engine in engines:
            engine_security = engine.get("securityContext", {})
            if engine_security.get("allowPrivilegeEscalation") is not False or \
                    "ALL" not in engine_security.get("capabilities", {}).get("drop", []):
                self.fail(where, f"container {engine.get('name')} may escalate "
                          "privileges or keeps capabilities")

        # Guaranteed QoS.
        for container in [sidecar] + engines + [c for c in pod.get("initContainers", [])
                                                if c is not sidecar]:
            self.check_guaranteed(where, container)

        # Memory limit against --max_bytes.
        try:
            limit = quantity(sidecar["resources"]["limits"]["memory"])
            max_bytes = int(flags["max_bytes"])
            grpc_bytes = int(flags.get("grpc_memory_bytes", 1 << 30))
            need = 2 * max_bytes + grpc_bytes + OVERHEAD_BYTES
            if limit < need:
                self.fail(where, f"entrokv memory limit {limit / (1 << 20):.0f} Mi is below "
                          f"2 x --max_bytes + --grpc_memory_bytes + 512 Mi = "
                          f"{need / (1 << 20):.0f} Mi")
        except (KeyError, ValueError) as error:
            self.fail(where, f"cannot check the memory limit against --max_bytes: {error}")

        # Image and GPU.
        want = OVERLAY_IMAGES.get(overlay)
        image = sidecar.get("image", "")
        if want and (image_name(image).rsplit("/", 1)[-1] != want
                     or image_tag(image) != version):
            self.fail(where, f"entrokv image {image} is not <registry>/{want}:{version}, "
                      "the tag deploy/build-image.sh builds")
        gpu_limit = sidecar.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        if overlay == "gpu":
            if flags.get("gpu") != "true":
                self.fail(where, "the GPU overlay does not pass --gpu=true")
            if not gpu_limit:
                self.fail(where, "the GPU overlay gives entrokv no nvidia.com/gpu")
            if not any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])):
                self.fail(where, "the GPU overlay has no nvidia.com/gpu toleration")
        elif overlay == "cpu":
            if flags.get("gpu") != "false":
                self.fail(where, "the CPU overlay does not pass --gpu=false")
            if gpu_limit:
                self.fail(where, "the CPU overlay gives entrokv a GPU")

    def check_guaranteed(self, where, container):
        name = container.get("name")
        resources = container.get("resources", {})
        requests = resources.get("requests", {})
        limits = resources.get("limits", {})
        for resource in ("cpu", "memory"):
            if resource not in limits or resource not in requests:
                self.fail(where, f"container {name}: {resource} requests and limits "
                          "must both be set (Guaranteed QoS)")
                continue
            try:
                if quantity(requests[resource]) != quantity(limits[resource]):
                    self.fail(where, f"container {name}: {resource} request "
                              f"{requests[resource]} != limit {limits[resource]} "
                              "(not Guaranteed QoS)")
            except ValueError as error:
                self.fail(where, f"container {name}: {error}")
        for resource in set(requests) | set(limits):
            if resource in ("cpu", "memory"):
                continue
            if str(requests.get(resource, limits.get(resource))) != str(limits.get(resource)):
                self.fail(where, f"container {name}: {resource} request != limit")


# ---- helpers ---------------------------------------------------------------

def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def merge(base, patch):
    """Strategic merge for what the manifests use: maps merge recursively;
    lists of maps with a "name" merge item by item on it; other lists and
    scalars are replaced; a null value deletes the key."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = merge(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch
            and all(isinstance(i, dict) and "name" in i for i in base + patch)):
        out = [copy.deepcopy(i) for i in base]
        for item in patch:
            for index, existing in enumerate(out):
                if existing["name"] == item["name"]:
                    out[index] = merge(existing, item)
                    break
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def pod_containers(obj):
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("initContainers", []) + spec.get("containers", [])


def image_name(image):
    last = image.rsplit("/", 1)[-1]
    return image[: len(image) - len(last)] + last.split(":", 1)[0].split("@", 1)[0]


def image_tag(image):
    last = image.rsplit("/", 1)[-1].split("@", 1)[0]
    return last.split(":", 1)[1] if ":" in last else ""


def parse_flags(args):
    flags = {}
    for arg in args:
        match = re.fullmatch(r"--?([a-z_]+)(?:=(.*))?", str(arg))
        if match:
            flags[match.group(1)] = match.group(2) if match.group(2) is not None else "true"
    return flags


def port_of(address):
    match = re.fullmatch(r".*:([0-9]+)", address)
    return int(match.group(1)) if match else None


def duration_seconds(text):
    match = re.fullmatch(r"([0-9.]+)(ms|s|m|h)", text)
    if not match:
        return float("inf")
    return float(match.group(1)) * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def find_keys(obj, key):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and isinstance(v, str):
                yield v
            else:
                yield from find_keys(v, key)
    elif isinstance(obj, list):
        for item in obj:
            yield from find_keys(item, key)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."),
                        help="repository root (default: two folders up)")
    args = parser.parse_args()
    errors = Checker(args.root).run()
    for error in errors:
        print(f"check_manifests: {error}")
    if errors:
        print(f"check_manifests: {len(errors)} problem(s)")
        return 1
    print("check_manifests: deploy/k8s overlays cpu, gpu: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
