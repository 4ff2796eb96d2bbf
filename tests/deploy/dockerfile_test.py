#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# dockerfile_test: deploy/docker/Dockerfile checked offline against the tree
# and the Kubernetes manifests (no image is built here; deploy/README.md
# "Containers" says what was built where):
#   - it parses: instructions (continuations, comments, exec and shell
#     forms), stages, FROM [--platform] IMAGE AS name;
#   - every COPY --from and RUN --mount from= names an earlier stage;
#   - every source COPY takes from the context exists, lands at the same
#     path under /src, and neither it nor a tracked file under it is
#     excluded by .dockerignore; together they hold what CMake reads:
#     CMakeLists.txt, every directory the top level adds (tests/ only when
#     the image builds tests) and the files cmake/*.cmake name;
#   - every -D of the cmake configure is a cache variable the project
#     defines (option, set CACHE, tributary_feature) or CMake's own, with a
#     value it takes; every feature is ON or OFF (never AUTO, which would
#     drop a part silently), and ON for each package the runtime installs;
#   - the runtime installs packages cpack makes (CPACK_DEBIAN_*_PACKAGE_NAME)
#     and the program of its CMD/ENTRYPOINT, as every command the manifests
#     run in the image, is one of them installs to bin (install(TARGETS ...
#     COMPONENT), OUTPUT_NAME); with dpdk built, the ring mempool plugin is
#     installed (DPDK loads it, no package depends on it);
#   - EXPOSE is exactly the ports, with protocols, that the manifests'
#     containers of the image declare;
#   - amd64 and arm64: base images are Debian 12's multi-arch ones with no
#     fixed --platform, the build accepts exactly amd64 and arm64, a stage
#     reading TARGETARCH declares it, no command names one architecture;
#   - the runtime's USER is a non-root uid:gid it creates, which the
#     manifests' runAsUser and fsGroup repeat; the dpdk overlay runs the
#     daemon as root.
# Usage: dockerfile_test.py REPO_ROOT [DOCKERFILE]. Exit 0 when all hold, 1
# naming each failure.
import glob
import json
import os
import re
import shlex
import subprocess
import sys

import yaml

ROOT = os.path.abspath(sys.argv[1])
DOCKERFILE = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "deploy/docker/Dockerfile")
IMAGE = "tributary"  # the image name deploy/k8s/base/kustomization.yaml maps
ARCHES = {"amd64", "arm64"}
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL " + what, file=sys.stderr)
    return ok


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


# ---- The Dockerfile parser -------------------------------------------------

class Instruction:
    def __init__(self, line, cmd, rest):
        self.line, self.cmd, self.rest = line, cmd, rest
        self.flags, self.args = {}, rest
        if cmd in ("FROM", "COPY", "ADD", "RUN"):  # leading --name=value flags
            while self.args.startswith("--"):
                word, _, tail = self.args.partition(" ")
                name, _, value = word[2:].partition("=")
                self.flags.setdefault(name, []).append(value)
                self.args = tail.lstrip()

    def exec_form(self):
        """The JSON array of CMD/ENTRYPOINT/RUN ["a", ...], or None (shell form)."""
        if self.args.startswith("["):
            try:
                value = json.loads(self.args)
                if isinstance(value, list):
                    return value
            except ValueError:
                pass
        return None

    def words(self):
        return self.exec_form() or shlex.split(self.args, comments=False, posix=True)


def parse(text):
    """Instructions with their first line. Comment lines end nowhere and are
    dropped inside a continuation too, as Docker does; the escape is \\."""
    out, buf, start = [], "", None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if line.lstrip().startswith("#"):
            continue
        if not buf and not line.strip():
            continue
        if start is None:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        cmd, _, rest = buf.strip().partition(" ")
        out.append(Instruction(start, cmd.upper(), rest.strip()))
        buf, start = "", None
    check(not buf, "Dockerfile: a continuation runs off the end")
    return out


class Stage:
    def __init__(self, index, frm):
        self.index, self.frm, self.body = index, frm, []
        words = frm.args.split()
        self.image = words[0] if words else ""
        self.name = words[2].lower() if len(words) == 3 and words[1].upper() == "AS" else None
        check(len(words) in (1, 3) and (len(words) == 1 or self.name),
              "Dockerfile:%d: FROM %s is not IMAGE [AS name]" % (frm.line, frm.args))

    def all(self, cmd):
        return [i for i in self.body if i.cmd == cmd]

    def runs(self):
        return " && ".join(i.args for i in self.all("RUN"))


def stages_of(instructions):
    stages, global_args = [], []
    for ins in instructions:
        if ins.cmd == "FROM":
            stages.append(Stage(len(stages), ins))
        elif not stages:
            check(ins.cmd == "ARG", "Dockerfile:%d: %s before the first FROM" % (ins.line, ins.cmd))
            global_args.append(ins)
        else:
            stages[-1].body.append(ins)
    return stages, global_args


# ---- .dockerignore ---------------------------------------------------------

def ignore_rules():
    path = os.path.join(ROOT, ".dockerignore")
    rules = []
    if not os.path.exists(path):
        return rules
    for line in read(".dockerignore").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line[1:] if negate else line).lstrip("/")
        rules.append((negate, re.compile("^" + glob_regex(pattern) + "$"), line))
    return rules


def glob_regex(pattern):
    """Docker's patterns: Go's filepath.Match, plus ** for any directories."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif c == "*":
            out, i = out + "[^/]*", i + 1
        elif c == "?":
            out, i = out + "[^/]", i + 1
        elif c == "[":
            end = pattern.find("]", i + 1)
            body = pattern[i + 1:end]
            out += "[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]"
            i = end + 1
        elif c == "\\" and i + 1 < len(pattern):
            out, i = out + re.escape(pattern[i + 1]), i + 2
        else:
            out, i = out + re.escape(c), i + 1
    return out


def excluded(rules, path):
    """The rule that excludes path (itself or a directory above it), or None."""
    parts = path.strip("/").split("/")
    verdict = None
    for negate, regex, line in rules:
        if any(regex.match("/".join(parts[:k])) for k in range(1, len(parts) + 1)):
            verdict = None if negate else line
    return verdict


def tracked_under(path):
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "--", path],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            return out.stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return []


# ---- What CMake says -------------------------------------------------------

def cmake_files():
    files = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "build"))]
        for f in filenames:
            if f == "CMakeLists.txt" or f.endswith(".cmake"):
                files.append(os.path.join(rel, f))
    return files


def cmake_cache_variables():
    """name -> accepted values (None: any) of the project's cache variables."""
    found = {}
    for f in cmake_files():
        text = read(f)
        for m in re.finditer(r"\boption\(\s*(\w+)", text):
            found[m.group(1)] = {"ON", "OFF", "TRUE", "FALSE", "1", "0", "YES", "NO"}
        for m in re.finditer(r"\bset\(\s*(\w+)\s[^)]*\bCACHE\s+\w+\s+\"([^\"]*)\"", text):
            choices = re.search(r"\(([A-Z]+(?:, [A-Z]+)+)\)", m.group(2))
            found[m.group(1)] = set(choices.group(1).split(", ")) if choices else None
        for m in re.finditer(r"\btributary_feature\(\s*(\w+)", text):
            found["TRIBUTARY_WITH_" + m.group(1)] = {"AUTO", "ON", "OFF"}
    found.pop("TRIBUTARY_WITH_${NAME}", None)
    return found


def features():
    return set(re.findall(r"^tributary_feature\((\w+)", read("cmake/TributaryFeatures.cmake"), re.M))


def packages_and_programs():
    """cpack's package names -> the programs each installs to bin."""
    component_package = {m.group(1).lower(): m.group(2) for m in re.finditer(
        r"set\(CPACK_DEBIAN_(\w+)_PACKAGE_NAME\s+([\w.+-]+)\)", read("cmake/TributaryPackaging.cmake"))}
    programs = {p: set() for p in component_package.values()}
    for f in cmake_files():
        text = read(f)
        names = {m.group(1): m.group(2) for m in re.finditer(
            r"set_target_properties\((\w+)\s+PROPERTIES\s+OUTPUT_NAME\s+([\w.-]+)\)", text)}
        for m in re.finditer(r"install\(TARGETS\s+(\w+)\s+RUNTIME\s+DESTINATION\s+"
                             r"\$\{CMAKE_INSTALL_BINDIR\}\s+COMPONENT\s+(\w+)\)", text):
            package = component_package.get(m.group(2))
            if check(package is not None, "%s: component %s has no Debian package" % (f, m.group(2))):
                programs[package].add(names.get(m.group(1), m.group(1)))
    return programs


def feature_of_package():
    """Packages cpack makes only with a feature: cmake/TributaryPackaging.cmake
    adds the manager's component when its target exists, which needs MANAGER."""
    return {"tributary-manager": "MANAGER"}


# ---- The manifests ---------------------------------------------------------

def manifests():
    """(file, document) of every YAML object under deploy/k8s."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy/k8s/**/*.yaml"), recursive=True)):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    out.append((os.path.relpath(path, ROOT), doc))
    return out


def pod_specs(docs):
    for path, doc in docs:
        spec = (doc.get("spec") or {}).get("template", {}).get("spec")
        if spec:
            yield path, doc, spec


# ---- The checks ------------------------------------------------------------

def main():
    with open(DOCKERFILE) as f:
        instructions = parse(f.read())
    stages, global_args = stages_of(instructions)
    if not check(len(stages) >= 2, "Dockerfile: not multi-stage (%d FROM)" % len(stages)):
        return
    names = [s.name for s in stages]
    check(len(set(n for n in names if n)) == len([n for n in names if n]), "Dockerfile: stage names repeat")
    runtime = stages[-1]  # the default target: what `docker build` without --target makes
    build = next((s for s in stages if s.all("RUN") and "cmake" in s.runs()), None)
    if not check(build is not None, "Dockerfile: no stage configures with cmake"):
        return

    # COPY --from / RUN --mount from= name an earlier stage.
    for s in stages:
        earlier = {x.name for x in stages[:s.index] if x.name} | {str(i) for i in range(s.index)}
        for ins in s.body:
            refs = [("COPY --from", r) for r in ins.flags.get("from", [])] if ins.cmd in ("COPY", "ADD") else []
            for mount in ins.flags.get("mount", []) if ins.cmd == "RUN" else []:
                fields = dict(kv.partition("=")[::2] for kv in mount.split(","))
                if "from" in fields:
                    refs.append(("RUN --mount from", fields["from"]))
            for how, ref in refs:
                check(ref.lower() in earlier, "Dockerfile:%d: %s=%s is not an earlier stage" % (ins.line, how, ref))

    # COPY from the context: sources exist, are not ignored, land in place,
    # and hold what CMake reads.
    rules = ignore_rules()
    copied = []
    for s in stages:
        for ins in s.all("COPY") + s.all("ADD"):
            if "from" in ins.flags:
                continue
            words = ins.words()
            sources, dest = words[:-1], words[-1]
            for src in sources:
                hits = glob.glob(os.path.join(ROOT, src))
                if not check(hits, "Dockerfile:%d: COPY source %s is not in the tree" % (ins.line, src)):
                    continue
                for hit in hits:
                    rel = os.path.relpath(hit, ROOT)
                    copied.append(rel)
                    rule = excluded(rules, rel)
                    check(rule is None, "Dockerfile:%d: %s is excluded by .dockerignore (%s)" % (ins.line, rel, rule))
                    for f in tracked_under(rel) if os.path.isdir(hit) and rel != "." else []:
                        rule = excluded(rules, f)
                        check(rule is None, "Dockerfile:%d: %s (under %s) is excluded by .dockerignore (%s)"
                              % (ins.line, f, rel, rule))
                    where = dest.rstrip("/") or "."
                    same = where == rel if os.path.isdir(hit) else where in (".", "./") or where == rel
                    check(same or rel == ".", "Dockerfile:%d: COPY %s lands at %s, not at its own path"
                          % (ins.line, src, dest))
    top = read("CMakeLists.txt")
    configure = configure_args(build)
    needed = {"CMakeLists.txt", "cmake"}
    for m in re.finditer(r"^\s*add_subdirectory\((\w+)\)", top, re.M):
        if m.group(1) == "tests" and configure.get("TRIBUTARY_BUILD_TESTS") == "OFF":
            continue
        needed.add(m.group(1))
    for f in glob.glob(os.path.join(ROOT, "cmake/*.cmake")):
        with open(f) as fh:
            needed |= set(re.findall(r"\$\{PROJECT_SOURCE_DIR\}/([\w./-]+)", fh.read()))
    for path in sorted(needed):
        check(any(c == "." or path == c or path.startswith(c.rstrip("/") + "/") for c in copied),
              "Dockerfile: the build does not copy %s, which CMake reads" % path)

    # cmake -D: the project's cache variables, values they take; features decided.
    known = cmake_cache_variables()
    for name, value in configure.items():
        if name.startswith("CMAKE_"):
            if name == "CMAKE_BUILD_TYPE":
                check(value in ("Debug", "Release", "RelWithDebInfo", "MinSizeRel"),
                      "Dockerfile: CMAKE_BUILD_TYPE=%s" % value)
            continue
        if not check(name in known, "Dockerfile: cmake -D%s: no such option in the project's CMake files" % name):
            continue
        check(known[name] is None or value.upper() in known[name],
              "Dockerfile: cmake -D%s=%s: not one of %s" % (name, value, sorted(known[name] or [])))
    for feature in sorted(features()):
        check(configure.get("TRIBUTARY_WITH_" + feature, "AUTO").upper() in ("ON", "OFF"),
              "Dockerfile: TRIBUTARY_WITH_%s is left AUTO: a missing library would drop it silently" % feature)

    # The runtime: cpack's packages, the programs they install.
    programs = packages_and_programs()
    installed = set()
    for token in runtime.runs().split():
        m = re.search(r"([a-z0-9][a-z0-9.+-]*)_[^/\s]*\.deb$", token.strip("\"'"))
        if m:
            installed.add(m.group(1))
            check(m.group(1) in programs, "Dockerfile: the runtime installs %s, which cpack does not make" % m.group(1))
            check("$" in token, "Dockerfile: %s names no architecture variable" % token)
    check(installed, "Dockerfile: the runtime installs none of the project's packages")
    for package in installed:
        feature = feature_of_package().get(package)
        if feature:
            check(configure.get("TRIBUTARY_WITH_" + feature, "").upper() == "ON",
                  "Dockerfile: the runtime installs %s but TRIBUTARY_WITH_%s is not ON" % (package, feature))
    runnable = set().union(*[programs.get(p, set()) for p in installed]) if installed else set()
    entry = [i.exec_form() or i.words() for i in runtime.all("ENTRYPOINT")]
    cmd = [i.exec_form() or i.words() for i in runtime.all("CMD")]
    starts = (entry[-1] if entry and entry[-1] else cmd[-1] if cmd else [None])[0]
    check(starts in runnable, "Dockerfile: the runtime starts %s, which its packages %s do not install (%s)"
          % (starts, sorted(installed), sorted(runnable)))
    if configure.get("TRIBUTARY_WITH_DPDK", "").upper() == "ON":
        args = {i.args.split("=", 1)[0]: i.args.split("=", 1)[1] if "=" in i.args else ""
                for i in runtime.all("ARG")}
        plugins = runtime.runs() + " " + " ".join(args.values())
        check(re.search(r"\blibrte-mempool-ring\d+\b", plugins) is not None,
              "Dockerfile: dpdk is built but the runtime lacks the ring mempool plugin (librte-mempool-ring)")

    # The manifests run the image's programs and declare its ports.
    docs = manifests()
    kustomization = [d for p, d in docs if d.get("kind") == "Kustomization" and "images" in d]
    check(any(i.get("name") == IMAGE for k in kustomization for i in k["images"]),
          "deploy/k8s: no kustomization maps the image %s" % IMAGE)
    want_ports = set()
    uid = gid = None
    for ins in runtime.all("USER"):
        uid, _, gid = ins.args.partition(":")
    for path, doc, spec in pod_specs(docs):
        ours = [c for c in spec.get("containers", []) if c.get("image", IMAGE) == IMAGE]
        for c in ours:
            if c.get("command"):
                check(c["command"][0] in runnable, "%s: %s runs %s, which the image does not install"
                      % (path, c.get("name"), c["command"][0]))
            for p in c.get("ports", []):
                want_ports.add("%d/%s" % (p["containerPort"], p.get("protocol", "TCP").lower()))
        if ours and doc.get("kind") != "Kustomization" and "image" in ours[0]:
            sc = spec.get("securityContext", {})
            check(str(sc.get("runAsUser")) == uid and str(sc.get("fsGroup")) == gid and sc.get("runAsNonRoot"),
                  "%s: %s's pod does not run as the image's user %s:%s with fsGroup %s"
                  % (path, doc["metadata"]["name"], uid, gid, gid))
    exposed = set()
    for ins in runtime.all("EXPOSE"):
        for word in ins.args.split():
            port, _, proto = word.partition("/")
            exposed.add("%s/%s" % (port, (proto or "tcp").lower()))
    check(exposed == want_ports, "Dockerfile: EXPOSE %s, the manifests' ports %s"
          % (sorted(exposed), sorted(want_ports)))

    # amd64 and arm64.
    for s in stages:
        check(s.image == "scratch" or re.fullmatch(r"debian:(bookworm|12)(-slim)?", s.image),
              "Dockerfile:%d: FROM %s is not Debian 12's multi-arch image" % (s.frm.line, s.image))
        for platform in s.frm.flags.get("platform", []):
            check(platform in ("$BUILDPLATFORM", "${BUILDPLATFORM}", "$TARGETPLATFORM", "${TARGETPLATFORM}"),
                  "Dockerfile:%d: FROM --platform=%s pins one platform" % (s.frm.line, platform))
        declared = False
        for ins in s.body:
            if ins.cmd == "ARG" and ins.args.split("=")[0] == "TARGETARCH":
                declared = True
            if ins.cmd != "ARG" and re.search(r"\$\{?TARGETARCH\b", ins.args):
                check(declared, "Dockerfile:%d: TARGETARCH read without ARG TARGETARCH in its stage" % ins.line)
        text = s.runs()
        accepted = [set(p.split("|")) for p in re.findall(r"\bin\s+([\w|]+)\)", text)]
        if s is build:
            check(ARCHES in accepted, "Dockerfile: the build does not accept exactly %s (cases: %s)"
                  % (sorted(ARCHES), accepted))
        rest = re.sub(r"\bcase\b.*?\besac\b", "", text)
        for word in ("amd64", "arm64", "x86_64", "aarch64"):
            check(word not in rest, "Dockerfile: stage %s names %s outside its architecture check"
                  % (s.name or s.index, word))

    # Non-root, as the manifests assume; dpdk as root.
    check(uid is not None and uid.isdigit() and uid != "0" and gid.isdigit(),
          "Dockerfile: the runtime's USER %s is not a numeric non-root uid:gid" % uid)
    check(re.search(r"useradd\b[^&]*--uid %s\b" % re.escape(uid or "x"), runtime.runs()) is not None,
          "Dockerfile: the runtime does not create the user %s" % uid)
    dpdk_patch = [d for p, d in docs if p.startswith("deploy/k8s/overlays/dpdk/") and d.get("kind") == "DaemonSet"]
    users = [c.get("securityContext", {}).get("runAsUser")
             for d in dpdk_patch for c in d["spec"]["template"]["spec"]["containers"]]
    check(users == [0], "deploy/k8s/overlays/dpdk: tributaryd's runAsUser is %s, not 0 (root)" % users)

    print("dockerfile: %d stages, %d instructions, %d checks failed" % (len(stages), len(instructions), len(failures)))


def configure_args(build):
    """-DNAME=VALUE of the build's cmake configure (the cmake with -S or -B)."""
    out = {}
    for ins in build.all("RUN"):
        words = shlex.split(ins.args.replace("\\\n", " "), posix=True)
        for i, w in enumerate(words):
            if os.path.basename(w) != "cmake" or not ({"-S", "-B"} & set(words[i + 1:i + 4])):
                continue
            j = i + 1
            while j < len(words) and words[j] not in ("&&", ";", "||", "|"):
                arg = words[j]
                if arg == "-D" and j + 1 < len(words):
                    j, arg = j + 1, "-D" + words[j + 1]
                if arg.startswith("-D"):
                    name, _, value = arg[2:].partition("=")
                    out[name.split(":")[0]] = value
                j += 1
    check(out, "Dockerfile: no cmake -D options found in the build stage")
    return out


main()
sys.exit(1 if failures else 0)
