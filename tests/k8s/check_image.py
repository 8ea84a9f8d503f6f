#!/usr/bin/env python3
"""ctest k8s_image_contents: checks that k8s/Dockerfile produces the image that
k8s/deploy/base/daemonset.yaml runs, without a container engine, network or root.
  1. `cmake --install` of this build installs exactly the shim, the broker, the CLI and the
     device plugin (nothing test-only), and the Dockerfile builds exactly their targets;
  2. every program and absolute path the DaemonSet's containers use (command[0] through the
     image's PATH, the init container's /bin/sh, its tools and the file it copies) exists in
     the final image, as the Dockerfile's COPY steps place the installed files, and
     everything the read-only-root init container writes is on one of its volumes;
  3. every DT_NEEDED library of the built broker, device plugin and CLI is provided by
     debian:12-slim itself or by a package of the Dockerfile's runtime list (Debian 12
     sonames mapped to packages by the table below, cross-checked with dpkg -S on a
     Debian 12 host), the shim needs glibc only, and no listed package is needed by none;
  4. the build stage's packages are a subset of tools/bootstrap.sh's.
Part 3 is skipped, loudly, on a host that is not Debian 12: binaries built there are not
the ones the image runs. The real image is exercised by k8s/image/verify_runtime_image.sh.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import yaml

# What `cmake --install` must put under the prefix, and the target behind each file.
EXPECTED_INSTALL = {
    "bin/fracgpu": "fracgpu_cli",
    "bin/fracgpu-broker": "fracgpu-broker",
    "bin/fracgpu-device-plugin": "fracgpu-device-plugin",
    "lib/libfracgpu.so": "fracgpu",
}
# The programs whose libraries the image must provide (the shim is checked apart: glibc only).
PROGRAMS = ["bin/fracgpu-broker", "bin/fracgpu-device-plugin", "bin/fracgpu"]

# Debian 12 (bookworm) package of each shared library the programs may need. A soname not
# here fails the test: find its package (dpkg -S), add it here and to the Dockerfile.
DEBIAN12_SONAME_PACKAGE = {
    "libc.so.6": "libc6",
    "libm.so.6": "libc6",
    "libdl.so.2": "libc6",
    "libpthread.so.0": "libc6",
    "librt.so.1": "libc6",
    "ld-linux-x86-64.so.2": "libc6",
    "libstdc++.so.6": "libstdc++6",
    "libgcc_s.so.1": "libgcc-s1",
    "libatomic.so.1": "libatomic1",
    "libspdlog.so.1.10": "libspdlog1.10",
    "libfmt.so.9": "libfmt9",
    "libcpp-httplib.so.0.11": "libcpp-httplib0.11",
    "libprometheus-cpp-core.so.1.0": "libprometheus-cpp-core1.0",
    "libgrpc++.so.1.51": "libgrpc++1.51",
    "libgpr.so.29": "libgrpc29",
    "libgrpc.so.29": "libgrpc29",
    "libaddress_sorting.so.29": "libgrpc29",
    "libupb.so.29": "libgrpc29",
    "libprotobuf.so.32": "libprotobuf32",
    "libz.so.1": "zlib1g",
    "libssl.so.3": "libssl3",
    "libcrypto.so.3": "libssl3",
}
# libabsl_*.so.20220623 all come from one package.
DEBIAN12_SONAME_PATTERNS = [(re.compile(r"libabsl_\w+\.so\.20220623"), "libabsl20220623")]
# Packages in debian:12-slim (Priority required, or pulled in by apt, which the slim image
# keeps): libraries from these need no apt-get install.
BASE_IMAGE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1", "zlib1g"}
# Programs of debian:12-slim the init container's script may call: Essential packages,
# always present. /bin/sh is dash.
BASE_IMAGE_PROGRAMS = {
    "/bin/sh": "dash",
    "sh": "dash",
    "mkdir": "coreutils",
    "cp": "coreutils",
    "chmod": "coreutils",
    "mv": "coreutils",
    "printf": "coreutils",
    "cat": "coreutils",
    "ln": "coreutils",
    "rm": "coreutils",
}
SHELL_BUILTINS = {"set", "cd", "echo", "printf", "test", "[", "exit", "true", "false", ":"}
# Libraries of a sanitizer build (FRACGPU_SANITIZE); the image is built without them.
SANITIZER_SONAME = re.compile(r"lib(asan|ubsan|tsan|lsan)\.so")
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}")


def ok(msg):
    print(f"ok: {msg}")


def installed_files(cmake, build_dir):
    with tempfile.TemporaryDirectory(prefix="fracgpu-image-install-") as prefix:
        subprocess.run([cmake, "--install", build_dir, "--prefix", prefix],
                       check=True, stdout=subprocess.DEVNULL)
        found = []
        for root, _, files in os.walk(prefix):
            for f in files:
                found.append(os.path.relpath(os.path.join(root, f), prefix))
        return sorted(found)


def needed(readelf, path):
    out = subprocess.run([readelf, "-d", "-W", path], check=True, capture_output=True,
                         text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def soname_package(soname):
    if soname in DEBIAN12_SONAME_PACKAGE:
        return DEBIAN12_SONAME_PACKAGE[soname]
    for pattern, pkg in DEBIAN12_SONAME_PATTERNS:
        if pattern.fullmatch(soname):
            return pkg
    return None


def dpkg_package(soname):
    """The host's package of a soname (Debian 12 host only), or None when dpkg cannot tell."""
    if not shutil.which("dpkg-query"):
        return None
    r = subprocess.run(["dpkg-query", "-S", f"*/{soname}"], capture_output=True, text=True)
    pkgs = set()
    for line in r.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if re.search(r"/(usr/)?lib/x86_64-linux-gnu/", path) and os.path.basename(path) == soname:
            pkgs.update(p.split(":")[0] for p in pkg.split(", "))
    return pkgs or None


def is_debian12():
    try:
        with open("/etc/os-release") as f:
            text = f.read()
    except OSError:
        return False
    return "ID=debian" in text and 'VERSION_ID="12"' in text


def resolve_in_image(program, image_files):
    if program.startswith("/"):
        return program if program in image_files else None
    for d in IMAGE_PATH.split(":"):
        if f"{d}/{program}" in image_files:
            return f"{d}/{program}"
    return None


def under(path, mounts):
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


def check_shell_script(cname, script, image_files, mounts):
    """The init container's `sh -c` script: its programs exist in the image, what it reads
    from the image exists, and what it writes is on a volume (its root is read-only)."""
    checked_copy = False
    for line in script.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line)
        redirect = None
        if ">" in words:
            i = words.index(">")
            redirect, words = words[i + 1], words[:i]
        prog, args = words[0], words[1:]
        if prog not in SHELL_BUILTINS and prog not in BASE_IMAGE_PROGRAMS:
            fail(f"{cname}: its script runs {prog!r}, not known to be in debian:12-slim "
                 f"(check, then add it to BASE_IMAGE_PROGRAMS)")
        operands = [a for a in args if not a.startswith("-")]
        writes = []
        if prog == "mkdir":
            writes = operands
        elif prog in ("cp", "mv"):
            sources, dest = operands[:-1], operands[-1]
            writes = [dest]
            for src in sources:
                if prog == "cp" and not under(src, mounts):
                    checked_copy = True
                    if src in image_files:
                        ok(f"{cname}: copies {src}, which the image has")
                    else:
                        fail(f"{cname}: copies {src}, which the Dockerfile does not put in the image")
        elif prog == "chmod":
            writes = operands[1:]
        if redirect:
            writes.append(redirect)
        for w in writes:
            if not under(w, mounts):
                fail(f"{cname}: writes {w}, outside its volumes (its root filesystem is read-only)")
    return checked_copy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--cmake", required=True)
    ap.add_argument("--readelf", required=True)
    ap.add_argument("--sanitized", action="store_true",
                    help="this build uses sanitizers: their runtime libraries are ignored")
    args = ap.parse_args()

    sys.path.insert(0, os.path.join(args.repo, "k8s", "image"))
    import image_facts as facts

    dockerfile = os.path.join(args.repo, "k8s", "Dockerfile")
    stages = facts.parse(dockerfile)
    final = stages[-1]
    build = facts.stage(stages, "build")

    # The package table is Debian 12's: the image must stay on Debian 12 for it to hold.
    if build.base != "debian:12" or final.base != "debian:12-slim":
        fail(f"stages are {build.base} and {final.base}; this test's tables are for debian:12 "
             "and debian:12-slim")
    if any(k == "ENTRYPOINT" for k, _ in final.instructions):
        fail("the final stage sets an ENTRYPOINT; the manifests give each container's command "
             "and expect none")

    # 1. What is installed, and that the Dockerfile builds it.
    installed = installed_files(args.cmake, args.build_dir)
    if sorted(EXPECTED_INSTALL) != installed:
        fail(f"cmake --install installs {installed}, expected {sorted(EXPECTED_INSTALL)}")
    else:
        ok(f"cmake --install installs {installed}")
    targets = facts.cmake_targets(build)
    if sorted(targets) != sorted(EXPECTED_INSTALL.values()):
        fail(f"the Dockerfile builds targets {targets}, the installed files come from "
             f"{sorted(EXPECTED_INSTALL.values())}")
    else:
        ok(f"the Dockerfile builds {targets}")
    options = facts.cmake_options(build)
    for key, want in [("CMAKE_BUILD_TYPE", "Release"), ("FRACGPU_BUILD_TESTS", "OFF"),
                      ("FRACGPU_BUILD_BENCH", "OFF")]:
        if options.get(key) != want:
            fail(f"the Dockerfile configures {key}={options.get(key)}, expected {want}")

    # 2. The DaemonSet's programs and paths in the image.
    image_files = facts.image_paths(stages, installed)
    for f in ("/usr/local/lib/libfracgpu.so", "/usr/local/bin/fracgpu-broker",
              "/usr/local/bin/fracgpu-device-plugin", "/usr/local/bin/fracgpu"):
        if f not in image_files:
            fail(f"the image has no {f} (COPY steps place: {sorted(image_files)})")
    image_programs = set(image_files) | {p for p in BASE_IMAGE_PROGRAMS if p.startswith("/")}
    with open(os.path.join(args.repo, "k8s", "deploy", "base", "daemonset.yaml")) as f:
        pod = yaml.safe_load(f)["spec"]["template"]["spec"]
    containers = pod.get("initContainers", []) + pod["containers"]
    ours = [c for c in containers if c.get("image") == "fracgpu"]
    if len(ours) != 3:
        fail(f"expected 3 containers of image fracgpu in the DaemonSet, found {len(ours)}")
    copied_shim = False
    for c in ours:
        cmd = c.get("command") or []
        if not cmd:
            fail(f"{c['name']}: no command (the image has no ENTRYPOINT; its CMD is the CLI's help)")
            continue
        where = resolve_in_image(cmd[0], image_programs)
        if not where:
            fail(f"{c['name']}: runs {cmd[0]!r}, which is not in the image on PATH {IMAGE_PATH}")
        else:
            ok(f"{c['name']}: runs {cmd[0]} = {where}")
        if cmd[0] in ("/bin/sh", "sh") and len(cmd) >= 3 and cmd[1] == "-c":
            mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
            if not c.get("securityContext", {}).get("readOnlyRootFilesystem"):
                mounts.append("/")
            copied_shim |= check_shell_script(c["name"], cmd[2], set(image_files), mounts)
    if not copied_shim:
        fail("no container copies a file out of the image: expected the init container to copy the shim")

    # 3. Libraries.
    runtime_pkgs = facts.apt_packages(final)
    if not runtime_pkgs:
        fail("no apt-get install in the final stage")
    bin_dir = os.path.join(args.build_dir, "bin")
    lib_dir = os.path.join(args.build_dir, "lib")
    shim_needed = needed(args.readelf, os.path.join(lib_dir, "libfracgpu.so"))
    non_glibc = [s for s in shim_needed if soname_package(s) != "libc6"]
    if non_glibc:
        fail(f"libfracgpu.so needs {non_glibc}; it must need glibc only to load into any image")
    else:
        ok(f"libfracgpu.so needs glibc only: {shim_needed}")
    if not is_debian12():
        print("SKIPPED (part 3): this host is not Debian 12, so its binaries' libraries say "
              "nothing about the image's; run this test on Debian 12 (CI) or "
              "k8s/image/verify_runtime_image.sh")
    else:
        used_pkgs = set()
        for prog in PROGRAMS:
            path = os.path.join(bin_dir, os.path.basename(prog))
            sonames = needed(args.readelf, path)
            if not sonames:
                fail(f"{path}: no NEEDED entries read (not a dynamic executable?)")
            for soname in sonames:
                if args.sanitized and SANITIZER_SONAME.match(soname):
                    continue
                pkg = soname_package(soname)
                host_pkgs = dpkg_package(soname)
                if pkg is None:
                    fail(f"{prog} needs {soname}, which the table does not know (dpkg -S says "
                         f"{host_pkgs}): add it to DEBIAN12_SONAME_PACKAGE and, unless it is in "
                         "debian:12-slim, to the Dockerfile's runtime packages")
                    continue
                if host_pkgs is not None and pkg not in host_pkgs:
                    fail(f"the table maps {soname} to {pkg}, dpkg -S on this Debian 12 host says {host_pkgs}")
                used_pkgs.add(pkg)
                if pkg in BASE_IMAGE_PACKAGES:
                    ok(f"{prog}: {soname} from {pkg} (in debian:12-slim)")
                elif pkg in runtime_pkgs:
                    ok(f"{prog}: {soname} from {pkg} (installed by the Dockerfile)")
                else:
                    fail(f"{prog} needs {soname} from {pkg}, which the Dockerfile's final stage "
                         f"does not install (it installs {runtime_pkgs})")
        unused = [p for p in runtime_pkgs if p not in used_pkgs]
        if unused:
            fail(f"the Dockerfile installs {unused}, which no program needs directly: remove them")

    # 4. The build stage's packages come from tools/bootstrap.sh's list.
    with open(os.path.join(args.repo, "tools", "bootstrap.sh")) as f:
        m = re.search(r"^PACKAGES=\((.*?)^\)", f.read(), re.S | re.M)
    if not m:
        fail("cannot find PACKAGES=( ... ) in tools/bootstrap.sh")
    else:
        bootstrap = set(m.group(1).split())
        extra = [p for p in facts.apt_packages(build) if p not in bootstrap]
        if extra:
            fail(f"the Dockerfile's build stage installs {extra}, not in tools/bootstrap.sh's list")
        else:
            ok("the build stage's packages are all in tools/bootstrap.sh's list")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("k8s_image_contents: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
