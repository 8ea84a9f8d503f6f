#!/usr/bin/env python3
"""Reads k8s/Dockerfile for the facts that the image's checks need, so that they check the
Dockerfile itself and never a copy of its lists: the stages, each stage's apt packages,
COPY steps, the cmake options and the staging directory of the build. Used by
tests/k8s/check_image.py (ctest k8s_image_contents) and k8s/image/verify_runtime_image.sh.
It understands the subset of Dockerfile syntax that k8s/Dockerfile uses (FROM ... AS,
RUN/COPY/ARG/LABEL/USER/CMD/WORKDIR, backslash continuations, # comments) and fails loudly
on anything it cannot read rather than guessing.

  image_facts.py runtime-packages DOCKERFILE   apt packages of the final stage, one a line
  image_facts.py build-packages DOCKERFILE     apt packages of the stage "build"
  image_facts.py cmake-options DOCKERFILE      the -D options of the build's cmake configure
  image_facts.py staging DOCKERFILE            DESTDIR and --prefix of the build's cmake --install
"""
import re
import shlex
import sys


class DockerfileError(Exception):
    pass


class Stage:
    def __init__(self, base, name):
        self.base = base
        self.name = name
        self.instructions = []  # (KEYWORD, argument text)

    def runs(self):
        return [a for k, a in self.instructions if k == "RUN"]

    def copies(self):
        """(from_stage or None, [sources], destination) of each COPY."""
        out = []
        for k, a in self.instructions:
            if k != "COPY":
                continue
            words = shlex.split(a)
            src_from = None
            while words and words[0].startswith("--"):
                flag = words.pop(0)
                if flag.startswith("--from="):
                    src_from = flag[len("--from="):]
            if len(words) < 2:
                raise DockerfileError(f"COPY without source and destination: {a!r}")
            out.append((src_from, words[:-1], words[-1]))
        return out


def parse(path):
    """The stages of a Dockerfile, in order."""
    with open(path, encoding="utf-8") as f:
        raw = f.read().splitlines()
    logical = []
    current = ""
    for line in raw:
        stripped = line.strip()
        # Comment lines are dropped, also inside a continued instruction (as Docker does).
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        logical.append(current.strip())
        current = ""
    if current.strip():
        logical.append(current.strip())

    stages = []
    for inst in logical:
        keyword, _, arg = inst.partition(" ")
        keyword = keyword.upper()
        arg = arg.strip()
        if keyword == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", arg, re.IGNORECASE)
            if not m:
                raise DockerfileError(f"cannot read FROM {arg!r}")
            stages.append(Stage(m.group(1), m.group(2)))
        elif keyword == "ARG" and not stages:
            continue  # an ARG before the first FROM
        elif not stages:
            raise DockerfileError(f"{keyword} before the first FROM")
        else:
            stages[-1].instructions.append((keyword, arg))
    if not stages:
        raise DockerfileError(f"{path}: no FROM")
    return stages


def stage(stages, name):
    for s in stages:
        if s.name == name:
            return s
    raise DockerfileError(f"no stage named {name!r}")


def _shell_words(run):
    # The RUN commands here are plain sh: shlex splits them well enough to find the
    # arguments of apt-get install and cmake (operators come out as separate words).
    lexer = shlex.shlex(run, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    return list(lexer)


def apt_packages(stage_):
    """Packages named after `apt-get install` in a stage's RUN steps."""
    pkgs = []
    for run in stage_.runs():
        words = _shell_words(run)
        for i, w in enumerate(words):
            if w == "install" and i > 0 and words[i - 1] in ("apt-get", "apt"):
                for arg in words[i + 1:]:
                    if arg in ("&&", "||", ";", "|", "&"):
                        break
                    if not arg.startswith("-"):
                        pkgs.append(arg)
    return pkgs


def cmake_options(stage_):
    """The -D options of the stage's `cmake -S ... -B ...` configure step."""
    opts = {}
    found = False
    for run in stage_.runs():
        words = _shell_words(run)
        for i, w in enumerate(words):
            if w == "cmake" and i + 1 < len(words) and words[i + 1] == "-S":
                found = True
                for arg in words[i + 1:]:
                    if arg in ("&&", "||", ";", "|"):
                        break
                    if arg.startswith("-D"):
                        key, _, value = arg[2:].partition("=")
                        opts[key] = value
    if not found:
        raise DockerfileError("no `cmake -S` configure step in the build stage")
    return opts


def cmake_targets(stage_):
    """The --target list of the stage's `cmake --build`."""
    for run in stage_.runs():
        words = _shell_words(run)
        for i, w in enumerate(words):
            if w == "cmake" and i + 1 < len(words) and words[i + 1] == "--build":
                targets = []
                collecting = False
                for arg in words[i + 2:]:
                    if arg in ("&&", "||", ";", "|"):
                        break
                    if arg == "--target":
                        collecting = True
                    elif arg.startswith("-"):
                        collecting = False
                    elif collecting:
                        targets.append(arg)
                return targets
    raise DockerfileError("no `cmake --build` step in the build stage")


def staging(stage_):
    """(DESTDIR, prefix) of the stage's `cmake --install`."""
    for run in stage_.runs():
        words = _shell_words(run)
        for i, w in enumerate(words):
            if w == "cmake" and i + 1 < len(words) and words[i + 1] == "--install":
                destdir = ""
                if i > 0 and words[i - 1].startswith("DESTDIR="):
                    destdir = words[i - 1][len("DESTDIR="):]
                prefix = None
                for j in range(i + 2, len(words)):
                    if words[j] in ("&&", "||", ";", "|"):
                        break
                    if words[j] == "--prefix" and j + 1 < len(words):
                        prefix = words[j + 1]
                    elif words[j].startswith("--prefix="):
                        prefix = words[j][len("--prefix="):]
                if prefix is None:
                    raise DockerfileError("cmake --install without --prefix")
                return destdir, prefix
    raise DockerfileError("no `cmake --install` step in the build stage")


def image_paths(stages, installed):
    """Where the files that `cmake --install` puts under the prefix (relative paths, e.g.
    bin/fracgpu-broker) end up in the final image, following its COPY --from=build steps.
    Returns {image path: installed relative path}."""
    build = stage(stages, "build")
    destdir, prefix = staging(build)
    staged_root = (destdir.rstrip("/") + "/" + prefix.strip("/")).rstrip("/")
    # "build" itself or a stage that is it unchanged (FROM build AS binaries, which a
    # prebuilt tree can replace as a named build context).
    sources_of_build = {"build"} | {s.name for s in stages if s.base == "build" and not s.instructions}
    out = {}
    for src_from, sources, dest in stages[-1].copies():
        if src_from not in sources_of_build:
            continue
        for src in sources:
            src_dir = src.rstrip("/")
            for rel in installed:
                staged = staged_root + "/" + rel
                if staged == src_dir:
                    target = dest + rel.rsplit("/", 1)[-1] if dest.endswith("/") else dest
                elif staged.startswith(src_dir + "/"):
                    target = dest.rstrip("/") + "/" + staged[len(src_dir) + 1:]
                else:
                    continue
                out[target] = rel
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    what, path = argv[1], argv[2]
    stages = parse(path)
    if what == "runtime-packages":
        print("\n".join(apt_packages(stages[-1])))
    elif what == "build-packages":
        print("\n".join(apt_packages(stage(stages, "build"))))
    elif what == "cmake-options":
        for k, v in cmake_options(stage(stages, "build")).items():
            print(f"{k}={v}")
    elif what == "cmake-targets":
        print("\n".join(cmake_targets(stage(stages, "build"))))
    elif what == "staging":
        destdir, prefix = staging(stage(stages, "build"))
        print(f"{destdir} {prefix}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except DockerfileError as e:
        print(f"image_facts: {e}", file=sys.stderr)
        sys.exit(1)
