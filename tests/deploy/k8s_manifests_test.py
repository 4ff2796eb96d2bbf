#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# k8s_manifests_test: both overlays of deploy/k8s (udp, dpdk) render
# (kubectl kustomize) and their pieces agree with each other and with the
# binaries:
#   - every object is in the tributary namespace;
#   - the udp daemons' --manager list names exactly the manager StatefulSet's
#     pods (stable names through its headless Service, its port);
#   - the managers' --state names exactly the etcd StatefulSet's members,
#     and etcd's --initial-cluster names the same members;
#   - every file a container reads lies in a volume it mounts; secret files
#     are among the keys manager.yaml tells the operator to create;
#   - every flag in a command line is one the binary accepts (its --help),
#     and the daemon's whole command line passes tributaryd --print-config;
#   - the managers' topology (the generated ConfigMap) loads: the real
#     tributary-manager starts on it (file state, loopback, port 0);
#   - daemon and manager probe /readyz and /healthz on their metrics port;
#   - dpdk: the daemon runs --dataplane=dpdk with as many EAL lcores as
#     --dpdk-lanes, requests hugepages and mounts them at /dev/hugepages,
#     and has IPC_LOCK; udp: none of that.
# Usage: k8s_manifests_test.py REPO_ROOT (env: KUBECTL, TRIBUTARY_MANAGER_BIN,
# TRIBUTARYD). Exit 0 when all hold, 1 naming each failure.
import os
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = sys.argv[1]
KUBECTL = os.environ.get("KUBECTL", "kubectl")
MANAGER = os.environ["TRIBUTARY_MANAGER_BIN"]
DAEMON = os.environ["TRIBUTARYD"]
SECRET_KEYS = {"state.key", "token", "tls.crt", "tls.key", "ca.crt"}
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL " + what, file=sys.stderr)


def args_of(workload):
    return workload["spec"]["template"]["spec"]["containers"][0]["command"]


def flag(args, name):
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def check_overlay(overlay):
    rendered = subprocess.run([KUBECTL, "kustomize", os.path.join(ROOT, "deploy/k8s/overlays", overlay)],
                              capture_output=True, text=True, timeout=120)
    if rendered.returncode != 0:
        check(False, "kubectl kustomize %s failed: %s" % (overlay, rendered.stderr))
        return 0
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
        if d["kind"] != "Namespace":
            check(d["metadata"].get("namespace") == "tributary",
                  "%s/%s is not in namespace tributary" % (d["kind"], d["metadata"]["name"]))


    manager = by_kind["StatefulSet"]["tributary-manager"]
    etcd = by_kind["StatefulSet"]["etcd"]
    daemon = by_kind["DaemonSet"]["tributaryd"]
    margs, dargs, eargs = args_of(manager), args_of(daemon), args_of(etcd)

    # Daemons -> managers (udp only: the dpdk dataplane cannot hold placed
    # jobs, and tributaryd exits 2 given both).
    mport = flag(margs, "--listen").rsplit(":", 1)[1]
    msvc = manager["spec"]["serviceName"]
    want = ["tributary-manager-%d.%s:%s" % (i, msvc, mport) for i in range(manager["spec"]["replicas"])]
    if flag(dargs, "--dataplane") == "dpdk":
        check(flag(dargs, "--manager") is None,
              "%s: tributaryd --dataplane=dpdk with --manager exits 2 (no placed jobs on dpdk)" % overlay)
    else:
        check((flag(dargs, "--manager") or "").split(",") == want,
              "tributaryd --manager %s is not the manager pods %s" % (flag(dargs, "--manager"), want))
    svc_ports = [p["port"] for p in by_kind["Service"][msvc]["spec"]["ports"]]
    check(int(mport) in svc_ports, "manager port %s not in its Service %s" % (mport, svc_ports))
    check(by_kind["Service"][msvc]["spec"].get("clusterIP") == "None", "manager Service is not headless")
    check(flag(margs, "--advertise") == "$(POD_NAME).%s:%s" % (msvc, mport),
          "--advertise is not the pod's stable name")

    # Managers -> etcd.
    m = re.match(r"etcd://([^/]+)/(.+)$", flag(margs, "--state"))
    check(m is not None, "--state is not an etcd URL")
    esvc = etcd["spec"]["serviceName"]
    members = ["etcd-%d" % i for i in range(etcd["spec"]["replicas"])]
    check(m and m.group(1).split(",") == ["%s.%s:2379" % (n, esvc) for n in members],
          "--state endpoints %s are not the etcd members" % (m and m.group(1)))
    initial = flag(eargs, "--initial-cluster").split(",")
    check(initial == ["%s=http://%s.%s:2380" % (n, n, esvc) for n in members],
          "etcd --initial-cluster %s does not name its own members" % initial)

    # Files read lie in mounted volumes; secret files are documented keys.
    for name, w, args in (("manager", manager, margs), ("tributaryd", daemon, dargs)):
        mounts = {v["mountPath"]: v["name"] for v in w["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in w["spec"]["template"]["spec"]["volumes"]}
        for a in args:
            if "=" not in a or not a.split("=", 1)[1].startswith("/"):
                continue
            path = a.split("=", 1)[1]
            directory, base = path.rsplit("/", 1)
            check(directory in mounts, "%s %s: %s is not mounted" % (name, a, directory))
            vol = volumes.get(mounts.get(directory), {})
            if "secret" in vol:
                check(base in SECRET_KEYS, "%s %s: %s is not a documented secret key" % (name, a, base))
                items = vol["secret"].get("items")
                if items:
                    check(base in [i["path"] for i in items], "%s %s: not projected" % (name, a))
            if "configMap" in vol:
                cm = [c for n, c in by_kind["ConfigMap"].items() if n == vol["configMap"]["name"]]
                check(len(cm) == 1 and base in cm[0]["data"], "%s %s: not in the ConfigMap" % (name, a))

    # Flags the binaries accept.
    for binary, args in ((MANAGER, margs), (DAEMON, dargs)):
        helptext = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
        for a in args[1:]:
            check(re.search(r"\s%s(?![\w-])" % re.escape(a.split("=", 1)[0]), helptext) is not None,
                  "%s does not take %s" % (os.path.basename(binary), a.split("=", 1)[0]))

    # The daemon's command line validates as a whole (--print-config exits 2
    # on a value out of range or a setting nothing would read); the pod's
    # variables get sample values.
    sample = [re.sub(r"\$\(NODE_IP\)", "198.18.0.1", re.sub(r"\$\(NODE_NAME\)", "node0", a))
              for a in dargs[1:]]
    proc = subprocess.run([DAEMON] + sample + ["--print-config"], capture_output=True, text=True)
    check(proc.returncode == 0, "tributaryd refuses the daemon's command line: " + proc.stderr.strip())

    # The topology loads in the real manager.
    topology = list(by_kind["ConfigMap"].values())[0]["data"]["topology.yaml"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "topology.yaml")
        with open(path, "w") as f:
            f.write(topology)
        proc = subprocess.Popen([MANAGER, "--listen", "127.0.0.1:0", "--topology", path,
                                 "--state-file", os.path.join(tmp, "state")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = ""
        for line in proc.stdout:  # until it serves, or exits (then EOF)
            seen += line
            if line.startswith("tributary-manager listening on"):
                break
        check("tributary-manager listening on" in seen, "tributary-manager refused the topology: " + seen)
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()



    # The dataplane.
    dpdk = flag(dargs, "--dataplane") == "dpdk"
    check(dpdk == (overlay == "dpdk"), "%s: tributaryd --dataplane is %s" % (overlay, flag(dargs, "--dataplane")))
    c = daemon["spec"]["template"]["spec"]["containers"][0]
    requests = c.get("resources", {}).get("requests", {})
    caps = c.get("securityContext", {}).get("capabilities", {}).get("add", [])
    mounts = [v["mountPath"] for v in c["volumeMounts"]]
    if dpdk:
        m = re.search(r"-l (\d+)-(\d+)", flag(dargs, "--eal-args") or "")
        check(m is not None and int(m.group(2)) - int(m.group(1)) + 1 == int(flag(dargs, "--dpdk-lanes")),
              "dpdk: the EAL lcores (-l) are not --dpdk-lanes")
        check(any(k.startswith("hugepages-") for k in requests), "dpdk: no hugepages requested")
        check("/dev/hugepages" in mounts, "dpdk: hugepages not mounted at /dev/hugepages")
        check("IPC_LOCK" in caps, "dpdk: no IPC_LOCK")
    else:
        check(not caps and not any(k.startswith("hugepages-") for k in requests),
              "udp: capabilities or hugepages where none are needed")
    for name, w, args in (("tributaryd", daemon, dargs), ("manager", manager, margs)):
        c = w["spec"]["template"]["spec"]["containers"][0]
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            got = c.get(probe, {}).get("httpGet", {})
            check(got.get("path") == path and
                  str(got.get("port")) == flag(args, "--metrics-address").rsplit(":", 1)[1],
                  "%s: %s %s is not %s on the metrics port" % (overlay, name, probe, path))
    return len(docs)


objects = 0
for overlay in ("udp", "dpdk"):
    objects += check_overlay(overlay)

print("k8s manifests: 2 overlays, %d objects, %d failures" % (objects, len(failures)))
sys.exit(1 if failures else 0)
