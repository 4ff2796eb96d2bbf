// SPDX-License-Identifier: Apache-2.0
// Reading the YAML files users write: tributaryd's --config and
// tributary-manager's --topology.
//
// Two checks that yaml-cpp does not make, written once for both readers:
// ReadYamlFile refuses a path that is a directory or cannot be read (an
// ifstream opens a directory and reads nothing, which would pass as an empty
// file and silently run with defaults), and CheckUniqueKeys refuses a
// mapping that repeats a key (yaml-cpp keeps both entries, and a lookup sees
// only the first, so "port: 1 ... port: 2" would silently keep one of them).
//
// Errors are Status (common/status.h) with messages a caller prefixes with
// the file's name. Thread-safety: pure functions on their arguments.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "common/status.h"

namespace tributary::yaml {

// The whole text of the file at `path`. A directory, a file that cannot be
// opened or a read error is InvalidArgument "cannot read WHAT 'PATH': why"
// (`what` says which file it is: "config file", "topology file"). Other
// non-regular files (a pipe from `--config <(...)`) are read as files.
Result<std::string> ReadYamlFile(const std::string& what, const std::string& path);

// InvalidArgument "line N: duplicate key 'K' (first at line M)" for the
// first mapping anywhere under `root` that holds a scalar key twice. Lines
// count from 1. Nodes reached again through an alias are walked once.
Status CheckUniqueKeys(const YAML::Node& root);

}  // namespace tributary::yaml
