#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# k8s_schema_test: every object both overlays of deploy/k8s render to
# (kubectl kustomize) is valid against the Kubernetes API's schemas,
# checked offline by k8s_schema_check.js with npm's kubernetes-models. A
# control proves the checker can fail: a copy of the daemon's DaemonSet
# with a port number written as text, a Service port without its required
# number and an object of an unknown kind must each be refused. (Unknown
# fields pass: the schemas allow them, as a server does unless kubectl asks
# for strict field validation, which needs a server.)
# Usage: k8s_schema_test.py REPO_ROOT (env: KUBECTL, NODE, NODE_PATH).
# Exit 0 when all hold, 1 naming each failure.
import copy
import json
import os
import subprocess
import sys

import yaml

ROOT = sys.argv[1]
KUBECTL = os.environ.get("KUBECTL", "kubectl")
NODE = os.environ.get("NODE", "node")
CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "k8s_schema_check.js")
failures = []


def validate(objects):
    run = subprocess.run([NODE, CHECK], input=json.dumps(objects), capture_output=True, text=True)
    return run.returncode, run.stdout + run.stderr


rendered = {}
for overlay in ("udp", "dpdk"):
    path = os.path.join(ROOT, "deploy", "k8s", "overlays", overlay)
    run = subprocess.run([KUBECTL, "kustomize", path], capture_output=True, text=True)
    if run.returncode != 0:
        failures.append("kubectl kustomize %s: %s" % (overlay, run.stderr.strip()))
        continue
    objects = [o for o in yaml.safe_load_all(run.stdout) if o]
    rendered[overlay] = objects
    rc, out = validate(objects)
    print("--- overlay %s\n%s" % (overlay, out.rstrip()))
    if rc != 0:
        failures.append("overlay %s: objects invalid against the schemas (above)" % overlay)

# The control: the same checker refuses what the API server would.
if "udp" in rendered:
    daemonset = copy.deepcopy(next(o for o in rendered["udp"] if o["kind"] == "DaemonSet"))
    daemonset["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "17820"
    service = copy.deepcopy(next(o for o in rendered["udp"] if o["kind"] == "Service"))
    del service["spec"]["ports"][0]["port"]
    unknown = {"apiVersion": "v1", "kind": "Dataplane", "metadata": {"name": "x"}}
    for what, obj in (("a port written as text", daemonset), ("a Service port without its number", service),
                      ("an unknown kind", unknown)):
        rc, out = validate([obj])
        if rc == 0:
            failures.append("the checker accepted %s:\n%s" % (what, out))
        else:
            print("ok   control: %s refused: %s" % (what, out.splitlines()[0]))

for f in failures:
    print("FAIL " + f, file=sys.stderr)
sys.exit(1 if failures else 0)
