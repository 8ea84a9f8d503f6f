#!/usr/bin/env python3
"""Checks fracgpu's Kubernetes manifests without a cluster.

Every YAML file under k8s/deploy must parse; every object must have apiVersion, kind and
metadata.name; the DaemonSet must never mount the host's /etc (the shim is installed into
a fracgpu directory, never into the host's /etc/ld.so.preload) and must pass the paths
the device plugin hands to the kubelet; every kustomization must build when kubectl is
available. Prints one line per problem and exits 1 if there is any.
"""
import pathlib
import shutil
import subprocess
import sys

import yaml


def main(deploy_dir: str) -> int:
    root = pathlib.Path(deploy_dir)
    problems = []
    files = sorted(root.rglob("*.yaml"))
    if not files:
        problems.append(f"no YAML files under {root}")
    objects = []
    for path in files:
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except yaml.YAMLError as error:
            problems.append(f"{path}: does not parse: {error}")
            continue
        for doc in docs:
            if not isinstance(doc, dict):
                problems.append(f"{path}: a document is not a mapping")
                continue
            if doc.get("kind") == "Kustomization":
                continue
            for key in ("apiVersion", "kind"):
                if key not in doc:
                    problems.append(f"{path}: an object has no {key}")
            if not (doc.get("metadata") or {}).get("name"):
                problems.append(f"{path}: a {doc.get('kind')} has no metadata.name")
            objects.append((path, doc))

    daemonsets = [d for _, d in objects if d.get("kind") == "DaemonSet"]
    if len(daemonsets) != 1:
        problems.append(f"expected one DaemonSet, found {len(daemonsets)}")
    for ds in daemonsets:
        spec = ds["spec"]["template"]["spec"]
        for volume in spec.get("volumes", []):
            host = (volume.get("hostPath") or {}).get("path", "")
            if host == "/etc" or host.startswith("/etc/"):
                problems.append(f"DaemonSet mounts the host's {host}: the shim must not touch the host's /etc")
        if not spec.get("hostPID"):
            problems.append("DaemonSet without hostPID: the broker could not see tenant processes' PIDs")
        containers = {c["name"]: c for c in spec.get("containers", [])}
        plugin = containers.get("device-plugin")
        if plugin is None:
            problems.append("DaemonSet has no device-plugin container")
        else:
            args = " ".join(plugin.get("command", []) + plugin.get("args", []))
            for flag in ("--plugin-dir=/var/lib/kubelet/device-plugins", "--broker-run-dir=/run/fracgpu",
                         "--shim-host-path=", "--preload-host-path="):
                if flag not in args:
                    problems.append(f"device-plugin container lacks {flag}")
            mounts = {m["mountPath"] for m in plugin.get("volumeMounts", [])}
            if "/run/fracgpu" not in mounts:
                problems.append("device-plugin must see /run/fracgpu at its host path")
        init = " ".join(" ".join(c.get("command", [])) for c in spec.get("initContainers", []))
        if "/usr/local/fracgpu/lib/libfracgpu.so" not in init:
            problems.append("the installer's ld.so.preload must name /usr/local/fracgpu/lib/libfracgpu.so")

    for path, doc in objects:
        if doc.get("kind") in ("Pod", "Job", "Deployment"):
            text = yaml.safe_dump(doc)
            if "fracgpu.io/gpu-slice" not in text:
                problems.append(f"{path}: example {doc['kind']} requests no fracgpu.io/gpu-slice")

    kubectl = shutil.which("kubectl")
    if kubectl:
        for kustomization in sorted(root.rglob("kustomization.yaml")):
            result = subprocess.run([kubectl, "kustomize", str(kustomization.parent)], capture_output=True, text=True)
            if result.returncode != 0:
                problems.append(f"kubectl kustomize {kustomization.parent} failed: {result.stderr.strip()}")
    else:
        print("kubectl not found: kustomizations not built (YAML parsing only)")

    for problem in problems:
        print(problem)
    print(f"{len(files)} files, {len(objects)} objects, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "k8s/deploy"))
