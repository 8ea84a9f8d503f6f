#!/usr/bin/env python3
"""The fracgpu DaemonSet's pod (k8s/deploy/base/daemonset.yaml), as fracgpu-cri-client's pod JSON.

Why: tests/runtime/cri_pod_test.sh runs the broker and the device plugin FROM THE IMAGE
through containerd's CRI exactly as the DaemonSet runs them. Reading the manifest here
(instead of copying its command lines into the test) makes a change to the DaemonSet a
change to what the test runs. What the kubelet would do, done here:
  - each container's command, env (fieldRef spec.nodeName -> --node-name), securityContext
    and volumeMounts are the manifest's; hostPID and the pod's securityContext too;
  - a hostPath volume mounted at P is the host's HOST_ROOT + path (HOST_ROOT: a temporary
    directory, so that a test never touches a node's real /run/fracgpu); a configMap volume
    is a directory holding its keys (from CONFIGMAP.yaml), mounted read-only as the kubelet
    does;
  - RELOCATION: this DaemonSet mounts every hostPath at its own path (the device plugin
    hands the kubelet host paths under them), so the relocated mount keeps that rule: the
    container path and every argument naming that path get HOST_ROOT in front too. That is
    the one change to the manifest's command lines, and it is mechanical;
  - the init containers come first in "containers", marked "init": true (the test creates,
    starts and waits for each before the others, as the kubelet does);
  - EXTRAS.json: {container: {"args": [...], "env": [...], "volumeMounts": [...]}} appended
    to a container, {"replace": {"--flag": "value"}} to change a flag's value: what stands in for the NVIDIA container toolkit (the simulated driver
    and NVML libraries, the device file) and the simulation's own flags.
hostNetwork is set (no CNI on the CI machine), and the image is IMAGE.

  daemonset_pod.py DAEMONSET.yaml CONFIGMAP.yaml HOST_ROOT IMAGE LOG_DIR CONFIG_DIR NODE
                   [EXTRAS.json]   -> the pod JSON on stdout
Test code: run by cri_pod_test.sh only.
"""
import json
import os
import sys
import uuid

import yaml


def main(argv):
    if len(argv) not in (8, 9):
        sys.exit(__doc__)
    ds_path, cm_path, host_root, image, log_dir, config_dir, node = argv[1:8]
    extras = json.load(open(argv[8])) if len(argv) == 9 else {}
    ds = yaml.safe_load(open(ds_path))
    if ds.get("kind") != "DaemonSet":
        sys.exit(f"{ds_path} is not a DaemonSet")
    cm = yaml.safe_load(open(cm_path))
    spec = ds["spec"]["template"]["spec"]

    volumes = {}  # name -> (host path, relocated path mounted at its own path or None)
    relocate = {}  # original path -> relocated one
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            path = v["hostPath"]["path"]
            host = host_root + path
            os.makedirs(host, exist_ok=True)  # Directory / DirectoryOrCreate
            volumes[v["name"]] = (host, path)
        elif "configMap" in v:
            if cm["metadata"]["name"] != v["configMap"]["name"]:
                sys.exit(f"volume {v['name']}: configMap {v['configMap']['name']} is not {cm_path}'s")
            os.makedirs(config_dir, exist_ok=True)
            for key, value in cm["data"].items():
                with open(os.path.join(config_dir, key), "w") as f:
                    f.write(value)
            volumes[v["name"]] = (config_dir, None)
        else:
            sys.exit(f"volume {v['name']}: only hostPath and configMap volumes are handled")

    def container(c, init):
        mounts = []
        for m in c.get("volumeMounts", []):
            host, original = volumes[m["name"]]
            path = m["mountPath"]
            read_only = m.get("readOnly", False) or original is None
            if original is not None and path == original:
                relocate[original] = host
                path = host
            mounts.append({"mountPath": path, "hostPath": host, "readOnly": read_only})
        env = []
        for e in c.get("env", []):
            if "value" in e:
                env.append({"name": e["name"], "value": e["value"]})
            elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                env.append({"name": e["name"], "value": node})
            else:
                sys.exit(f"{c['name']}: env {e['name']}: unsupported valueFrom")
        extra = extras.get(c["name"], {})
        return {
            "name": c["name"],
            "init": init,
            "image": image,
            "command": list(c.get("command", [])),
            "args": list(c.get("args", [])) + extra.get("args", []),
            "env": env + extra.get("env", []),
            "securityContext": c.get("securityContext", {}),
            "volumeMounts": mounts + extra.get("volumeMounts", []),
        }

    containers = [container(c, True) for c in spec.get("initContainers", [])]
    containers += [container(c, False) for c in spec["containers"]]

    # The relocation of the arguments: a path mounted at its own path, wherever an
    # argument names it (--run-dir=/run/fracgpu, --shim-host-path=/var/lib/fracgpu/lib/...).
    def rewrite(arg):
        flag, eq, value = arg.partition("=")
        if not eq:
            flag, value = "", arg
        for original, host in sorted(relocate.items(), key=lambda kv: -len(kv[0])):
            if value == original or value.startswith(original + "/"):
                return flag + eq + host + value[len(original):]
        return arg

    for c in containers:
        c["command"] = [rewrite(a) for a in c["command"]]
        # EXTRAS' "replace": {flag: value}, a flag's value changed (the metrics port: a free
        # one on this shared host instead of :9400).
        for flag, value in extras.get(c["name"], {}).get("replace", {}).items():
            hits = [i for i, a in enumerate(c["command"]) if a.startswith(flag + "=")]
            if not hits:
                sys.exit(f"{c['name']}: no {flag}= to replace")
            c["command"][hits[0]] = flag + "=" + value
    pod = {
        "metadata": {"name": "fracgpu-node", "namespace": "fracgpu", "uid": str(uuid.uuid4())},
        "logDirectory": log_dir,
        "spec": {
            "hostNetwork": True,
            "hostPID": spec.get("hostPID", False),
            "securityContext": spec.get("securityContext", {}),
            "containers": containers,
        },
    }
    json.dump(pod, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main(sys.argv)
