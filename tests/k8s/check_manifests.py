#!/usr/bin/env python3
"""Checks fracgpu's Kubernetes manifests without a cluster.

Without --tools (ctest k8s_manifests_parse): every YAML file under k8s/deploy must parse;
every object must have apiVersion, kind and metadata.name; the DaemonSet must never mount
the host's /etc (the shim is installed into a fracgpu directory, never into the host's
/etc/ld.so.preload), must pass the paths the device plugin hands to the kubelet and must
probe the broker with `fracgpu-broker --probe` (exec), not over the metrics port; a
NetworkPolicy must open the fracgpu pods to selected namespaces and ports only; the
example workloads must request fracgpu.io/gpu-slice.

With --tools DIR (ctest k8s_manifests_schema; DIR from tools/fetch_manifest_tools.sh):
every kustomization (base, overlays, examples) must build with the pinned `kubectl
kustomize`, without warnings; its output must pass tests/k8s/schema/validate.js (the
Kubernetes API types and the Prometheus Operator CRDs, kubernetes-models); a rendered
install (base or overlay) keeps the DaemonSet rules above and puts every namespaced
object in the DaemonSet's namespace. Then every fixture in tests/k8s/schema/bad must be
refused by the validator with exactly the problems its "# expect:" lines name, so the
validator is shown to bite.

--also DIR (repeatable; k8s/monitoring): a folder whose kustomizations are checked too.
Without --tools every file its kustomization.yaml names (resources, generators' files)
must exist, and the resources must parse as Kubernetes objects; with --tools it is built
and validated like the deploy folder's (the PrometheusRule, the dashboard's ConfigMap).
Its other YAML files (Prometheus rules, promtool tests, the adapter config) are not
Kubernetes objects and are left to tests/monitoring.
Prints one line per problem and exits 1 if there is any.
"""
import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

import yaml

SCHEMA_DIR = pathlib.Path(__file__).resolve().parent / "schema"

# Kinds that live outside namespaces, among those a fracgpu install could contain.
CLUSTER_SCOPED = {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "RuntimeClass", "StorageClass", "ValidatingWebhookConfiguration",
                  "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def check_daemonset(ds, where):
    problems = []
    spec = ds["spec"]["template"]["spec"]
    for volume in spec.get("volumes", []):
        host = (volume.get("hostPath") or {}).get("path", "")
        if host == "/etc" or host.startswith("/etc/"):
            problems.append(f"{where}: DaemonSet mounts the host's {host}: the shim must not touch the host's /etc")
    if not spec.get("hostPID"):
        problems.append(f"{where}: DaemonSet without hostPID: the broker could not see tenant processes' PIDs")
    containers = {c["name"]: c for c in spec.get("containers", [])}
    plugin = containers.get("device-plugin")
    if plugin is None:
        problems.append(f"{where}: DaemonSet has no device-plugin container")
    else:
        args = " ".join(plugin.get("command", []) + plugin.get("args", []))
        for flag in ("--plugin-dir=/var/lib/kubelet/device-plugins", "--broker-run-dir=/run/fracgpu",
                     "--shim-host-path=", "--preload-host-path="):
            if flag not in args:
                problems.append(f"{where}: device-plugin container lacks {flag}")
        mounts = {m["mountPath"] for m in plugin.get("volumeMounts", [])}
        if "/run/fracgpu" not in mounts:
            problems.append(f"{where}: device-plugin must see /run/fracgpu at its host path")
        # It refuses Allocate unless the shim and preload files exist (containerd would mount
        # an empty directory in their place): it must see them at their host paths.
        host_of = {v["name"]: (v.get("hostPath") or {}).get("path") for v in spec.get("volumes", [])}
        same_path = [m["mountPath"] for m in plugin.get("volumeMounts", [])
                     if host_of.get(m["name"]) == m["mountPath"]]
        for flag in ("--shim-host-path=", "--preload-host-path="):
            path = next((a[len(flag):] for a in plugin.get("command", []) + plugin.get("args", [])
                         if a.startswith(flag)), None)
            if path and not any(path.startswith(p.rstrip("/") + "/") for p in same_path):
                problems.append(f"{where}: device-plugin must see {path} ({flag[:-1]}) at its host path")
        # Unless CDI is off, the specs go to --cdi-dir, where the node's runtime reads them.
        argv = plugin.get("command", []) + plugin.get("args", [])
        if "--cdi=off" not in argv:
            cdi_dir = next((a[len("--cdi-dir="):] for a in argv if a.startswith("--cdi-dir=")), "/var/run/cdi")
            if not any(p == cdi_dir and not m.get("readOnly")
                       for m in plugin.get("volumeMounts", []) for p in [m["mountPath"]]
                       if host_of.get(m["name"]) == p):
                problems.append(f"{where}: device-plugin must mount its CDI directory {cdi_dir} writable at "
                                "its host path (or run with --cdi=off)")
        pod_resources = [m for m in plugin.get("volumeMounts", [])
                         if m["mountPath"] == "/var/lib/kubelet/pod-resources"]
        if not pod_resources or not pod_resources[0].get("readOnly"):
            problems.append(f"{where}: device-plugin must mount /var/lib/kubelet/pod-resources read-only "
                            "(the kubelet's PodResources API, for the tenants' pod labels)")
    broker = containers.get("broker")
    if broker is not None:
        for kind in ("livenessProbe", "readinessProbe"):
            command = " ".join(((broker.get(kind) or {}).get("exec") or {}).get("command", []))
            if "fracgpu-broker --probe" not in command:
                problems.append(f"{where}: the broker's {kind} must be the exec probe `fracgpu-broker --probe` "
                                "(an HTTP probe of the metrics port can be failed by any pod that reaches it)")
    init = " ".join(" ".join(c.get("command", [])) for c in spec.get("initContainers", []))
    if "/usr/local/fracgpu/lib/libfracgpu.so" not in init:
        problems.append(f"{where}: the installer's ld.so.preload must name /usr/local/fracgpu/lib/libfracgpu.so")
    return problems


def check_sources(root):
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
            if isinstance(doc, dict) and doc.get("kind") == "Kustomization":
                continue
            problems += object_problems(path, doc)
            if isinstance(doc, dict):
                objects.append((path, doc))

    daemonsets = [(p, d) for p, d in objects if d.get("kind") == "DaemonSet"]
    if len(daemonsets) != 1:
        problems.append(f"expected one DaemonSet, found {len(daemonsets)}")
    for path, ds in daemonsets:
        problems += check_daemonset(ds, path)

    # The metrics port is open to the monitoring namespace only (networkpolicy.yaml).
    policies = [doc for _, doc in objects if doc.get("kind") == "NetworkPolicy"
                and (doc.get("spec", {}).get("podSelector", {}).get("matchLabels", {})
                     .get("app.kubernetes.io/name")) == "fracgpu-node"]
    if not policies:
        problems.append("no NetworkPolicy selects the fracgpu-node pods: any pod could reach the metrics port")
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            if not rule.get("from") or any("namespaceSelector" not in peer for peer in rule["from"]):
                problems.append(f"NetworkPolicy {policy['metadata']['name']}: an ingress rule admits more than "
                                "selected namespaces")
            if not rule.get("ports"):
                problems.append(f"NetworkPolicy {policy['metadata']['name']}: an ingress rule admits every port")

    for path, doc in objects:
        if doc.get("kind") in ("Pod", "Job", "Deployment"):
            if "fracgpu.io/gpu-slice" not in yaml.safe_dump(doc):
                problems.append(f"{path}: example {doc['kind']} requests no fracgpu.io/gpu-slice")
    print(f"{len(files)} files, {len(objects)} objects")
    return problems


def object_problems(path, doc):
    """A parsed YAML document that must be a Kubernetes object (apiVersion, kind, a name)."""
    if not isinstance(doc, dict):
        return [f"{path}: a document is not a mapping"]
    problems = [f"{path}: an object has no {key}" for key in ("apiVersion", "kind") if key not in doc]
    if not (doc.get("metadata") or {}).get("name"):
        problems.append(f"{path}: a {doc.get('kind')} has no metadata.name")
    return problems


def check_extra_sources(root):
    """Parse-mode check of an --also folder: what each kustomization names exists and parses."""
    problems = []
    kustomizations = sorted(root.rglob("kustomization.yaml"))
    if not kustomizations:
        return [f"no kustomization.yaml under {root}"]
    for kustomization in kustomizations:
        try:
            spec = yaml.safe_load(kustomization.read_text()) or {}
        except yaml.YAMLError as error:
            problems.append(f"{kustomization}: does not parse: {error}")
            continue
        folder = kustomization.parent
        for resource in spec.get("resources", []):
            path = folder / resource
            if not path.exists():
                problems.append(f"{kustomization}: names {resource}, which does not exist")
                continue
            if path.is_dir():
                continue
            try:
                docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
            except yaml.YAMLError as error:
                problems.append(f"{path}: does not parse: {error}")
                continue
            for doc in docs:
                problems += object_problems(path, doc)
        for generator in spec.get("configMapGenerator", []) + spec.get("secretGenerator", []):
            for entry in generator.get("files", []):
                source = entry.split("=", 1)[-1]
                if not (folder / source).is_file():
                    problems.append(f"{kustomization}: {generator.get('name')} takes {source}, which does not exist")
        print(f"{kustomization.relative_to(root.parent)}: {len(spec.get('resources', []))} resources")
    return problems


def run_validator(node, modules, inputs):
    """Runs validate.js over (label, file) pairs; returns (exit status, problem lines, stderr)."""
    command = [node, str(SCHEMA_DIR / "validate.js")]
    for label, path in inputs:
        command += ["--label", label, str(path)]
    env = dict(os.environ, NODE_PATH=str(modules))
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    return result.returncode, [line for line in result.stdout.splitlines() if line], result.stderr.strip()


def kustomizations(root, extra_roots):
    """(label, kustomization.yaml) of the deploy folder ("base", "overlays/production") and
    of each --also folder (named after it: "monitoring")."""
    found = [(k.parent.relative_to(root).as_posix(), k) for k in sorted(root.rglob("kustomization.yaml"))]
    for extra in extra_roots:
        for k in sorted(extra.rglob("kustomization.yaml")):
            rel = k.parent.relative_to(extra).as_posix()
            found.append((extra.name if rel == "." else f"{extra.name}/{rel}", k))
    return found


def check_rendered(root, extra_roots, kubectl, node, modules, out_dir):
    problems = []
    renders = []
    for label, kustomization in kustomizations(root, extra_roots):
        result = subprocess.run([kubectl, "kustomize", str(kustomization.parent)], capture_output=True, text=True)
        if result.returncode != 0:
            problems.append(f"{label}: kubectl kustomize failed: {result.stderr.strip()}")
            continue
        if result.stderr.strip():
            problems.append(f"{label}: kubectl kustomize warns: {result.stderr.strip()}")
        rendered = out_dir / (label.replace("/", "_") + ".yaml")
        rendered.write_text(result.stdout)
        renders.append((label, rendered))

        docs = [d for d in yaml.safe_load_all(result.stdout) if isinstance(d, dict)]
        daemonsets = [d for d in docs if d.get("kind") == "DaemonSet"]
        for ds in daemonsets:
            problems += check_daemonset(ds, label)
        if daemonsets:
            namespace = daemonsets[0]["metadata"].get("namespace")
            for doc in docs:
                if doc.get("kind") in CLUSTER_SCOPED:
                    continue
                if doc.get("metadata", {}).get("namespace") != namespace:
                    problems.append(f"{label}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')} is not in the "
                                    f"DaemonSet's namespace {namespace}")
        print(f"{label}: built, {len(docs)} objects")
    if not renders:
        problems.append(f"no kustomization built under {root}")
        return problems

    status, lines, stderr = run_validator(node, modules, renders)
    if status not in (0, 1):
        problems.append(f"validate.js failed to run (exit {status}): {stderr}")
    problems += lines
    if status == 0 and lines:
        problems.append("validate.js printed problems but exited 0")
    print(f"schema: {stderr}")
    return problems


def check_fixtures(node, modules):
    """Every bad fixture must be refused with exactly the problems it expects."""
    problems = []
    fixtures = sorted((SCHEMA_DIR / "bad").glob("*.yaml"))
    if not fixtures:
        return [f"no negative fixtures in {SCHEMA_DIR / 'bad'}"]
    inputs = [(f"bad/{fixture.name}", fixture) for fixture in fixtures]
    # One run for all of them (a Node.js start each would cost more than the checks);
    # the label that starts each line tells which fixture it is about.
    status, lines, stderr = run_validator(node, modules, inputs)
    if status != 1:
        problems.append(f"validate.js exited {status} on the bad fixtures, expected 1 (refused): {stderr}")
    for label, fixture in inputs:
        expected = {f"{label}: {line.split('# expect:', 1)[1].strip()}"
                    for line in fixture.read_text().splitlines() if line.startswith("# expect:")}
        if not expected:
            problems.append(f"{label}: has no '# expect:' line")
        reported = {line for line in lines if line.startswith(f"{label}: ")}
        for line in sorted(expected - reported):
            problems.append(f"{label}: expected, not reported: {line}")
        for line in sorted(reported - expected):
            problems.append(f"{label}: reported, not expected: {line}")
    print(f"{len(fixtures)} bad fixtures, {len(lines)} problems reported as expected" if not problems else
          f"{len(fixtures)} bad fixtures")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deploy_dir", nargs="?", default="k8s/deploy")
    parser.add_argument("--tools", type=pathlib.Path,
                        help="folder made by tools/fetch_manifest_tools.sh (bin/kubectl, schema/node_modules)")
    parser.add_argument("--node", default="node", help="the Node.js executable")
    parser.add_argument("--also", type=pathlib.Path, action="append", default=[],
                        help="another folder of kustomizations to check (k8s/monitoring)")
    args = parser.parse_args()
    root = pathlib.Path(args.deploy_dir)

    if args.tools is None:
        problems = check_sources(root)
        for extra in args.also:
            problems += check_extra_sources(extra)
    else:
        kubectl = args.tools / "bin" / "kubectl"
        modules = args.tools / "schema" / "node_modules"
        missing = [str(p) for p in (kubectl, modules / "kubernetes-models") if not p.exists()]
        if missing:
            print(f"missing {', '.join(missing)}: run tools/fetch_manifest_tools.sh {args.tools}")
            return 1
        with tempfile.TemporaryDirectory() as out_dir:
            problems = check_rendered(root, args.also, str(kubectl), args.node, modules.resolve(),
                                      pathlib.Path(out_dir))
        problems += check_fixtures(args.node, modules.resolve())

    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
