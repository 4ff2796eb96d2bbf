// SPDX-License-Identifier: Apache-2.0
// Validates Kubernetes objects against the API's OpenAPI schemas, offline:
// npm's kubernetes-models (installed by scripts/setup-debian.sh) carries the
// schemas of every built-in kind and validates with ajv. Reads a JSON array
// of objects on stdin; prints one line per object; exits 1 if any object is
// invalid or of a kind it has no schema for, 2 on bad input.
// Usage: node k8s_schema_check.js < objects.json (NODE_PATH: npm root -g).
"use strict";

const fs = require("fs");

let objects;
try {
  objects = JSON.parse(fs.readFileSync(0, "utf8"));
} catch (e) {
  console.error("k8s_schema_check: stdin is not a JSON array: " + e.message);
  process.exit(2);
}
const version = require("kubernetes-models/package.json").version;
let failures = 0;
for (const obj of objects) {
  const where = `${obj.apiVersion} ${obj.kind} ${obj.metadata && obj.metadata.name}`;
  // "v1" -> kubernetes-models/v1/Kind; "apps/v1" -> kubernetes-models/apps/v1/Kind.
  let Model;
  try {
    Model = require(`kubernetes-models/${obj.apiVersion}/${obj.kind}`)[obj.kind];
  } catch (e) {
    console.log(`FAIL ${where}: no schema for this kind in kubernetes-models ${version}`);
    ++failures;
    continue;
  }
  try {
    new Model(obj).validate();
    console.log(`ok   ${where}`);
  } catch (e) {
    console.log(`FAIL ${where}: ${e.message}`);
    ++failures;
  }
}
console.log(`${objects.length} object(s), ${failures} invalid (kubernetes-models ${version})`);
process.exit(failures === 0 ? 0 : 1);
