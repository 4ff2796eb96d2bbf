// SPDX-License-Identifier: Apache-2.0
// The NCCL checks of `tributary doctor`: would NCCL find and load
// libnccl-net-tributary.so by its own search rules, with which ABI version,
// and which NCCL variables silently turn the aggregator off; see doctor.h.
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "tools/tributary/doctor.h"

namespace tributary::cli::doctor {
namespace {

// The ncclNet/ncclCollNet ABI versions looked for, newest first.
constexpr int kNewestAbi = 12;
constexpr int kOldestAbi = 6;

struct Library {
  void* handle = nullptr;
  std::string path;
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
};

std::string Env(const DoctorInputs& in, const char* name) {
  auto it = in.env.find(name);
  return it == in.env.end() ? "" : it->second;
}

bool EnvSet(const DoctorInputs& in, const char* name) { return in.env.count(name) != 0; }

// dlopen as NCCL does it (RTLD_LOCAL; lazily here: nothing is called).
bool Open(const std::string& name, Library* lib, std::string* error) {
  lib->handle = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (lib->handle == nullptr) {
    const char* e = dlerror();
    *error = e != nullptr ? e : "dlopen failed";
    return false;
  }
  link_map* map = nullptr;
  lib->path = dlinfo(lib->handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr ? map->l_name : name;
  return true;
}

struct Nccl {
  bool found = false;
  std::string path;
  int code = 0;  // ncclGetVersion's
  std::string searched;
};

Nccl FindNccl(const DoctorInputs& in) {
  Nccl nccl;
  Library lib;
  std::string error;
  const std::string name = in.nccl_library.empty() ? "libnccl.so.2" : in.nccl_library;
  nccl.searched = name;
  if (!Open(name, &lib, &error)) return nccl;
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(dlsym(lib.handle, "ncclGetVersion"));
  nccl.found = true;
  nccl.path = lib.path;
  if (get == nullptr || get(&nccl.code) != 0) nccl.code = 0;
  return nccl;
}

std::string VersionText(int code) {
  if (code <= 0) return "?";
  // Since 2.9: major * 10000 + minor * 100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

std::string Range(const std::vector<int>& versions) {
  if (versions.empty()) return "none";
  std::string s;
  for (int v : versions) s += (s.empty() ? "v" : ", v") + std::to_string(v);
  return s;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int NewestNetAbi(int code) {
  // The first release that looks for each ncclNetPlugin_vN.
  if (code >= 23000) return 12;
  if (code >= 22800) return 11;
  if (code >= 22600) return 10;
  if (code >= 22400) return 9;
  if (code >= 22000) return 8;
  if (code >= 21900) return 7;
  if (code > 0) return 6;
  return 0;
}

std::vector<std::string> NcclPluginCandidates(const std::string& value) {
  if (value.empty()) return {"libnccl-net.so"};
  std::vector<std::string> names = {value};
  // A bare name (no path, not already lib*.so) is also tried as
  // libnccl-net-NAME.so: NCCL_NET_PLUGIN=tributary.
  const bool is_library = value.rfind("lib", 0) == 0 && value.size() > 3 &&
                          value.compare(value.size() - 3, 3, ".so") == 0;
  if (value.find('/') == std::string::npos && !is_library) {
    names.push_back("libnccl-net-" + value + ".so");
  }
  return names;
}

Finding CheckNcclPlugin(const DoctorInputs& in) {
  const char* kName = "nccl-plugin";
  const Nccl nccl = FindNccl(in);
  const std::string value = Env(in, "NCCL_NET_PLUGIN");
  if (!nccl.found && !EnvSet(in, "NCCL_NET_PLUGIN")) {
    return {kName, Verdict::kSkip,
            "no " + nccl.searched + " found by the loader and NCCL_NET_PLUGIN unset: not an "
            "NCCL node (--nccl PATH names an NCCL library)", ""};
  }
  std::string saw = nccl.found ? "NCCL " + VersionText(nccl.code) + " at " + nccl.path
                               : "NCCL not found (" + nccl.searched + ")";
  const std::vector<std::string> candidates = NcclPluginCandidates(value);
  Library plugin;
  std::string tried, errors;
  for (const std::string& name : candidates) {
    tried += (tried.empty() ? "" : ", ") + name;
    std::string error;
    if (Open(name, &plugin, &error)) break;
    if (error.find("No such file") == std::string::npos) errors += "; " + error;
  }
  saw += "; NCCL_NET_PLUGIN" + (value.empty() ? std::string(" unset") : "=" + value);
  if (plugin.handle == nullptr) {
    return {kName, Verdict::kFail,
            saw + ": NCCL would find no net plugin (tried " + tried + errors +
                ") and run on its own transports: nothing reaches the aggregator",
            "export NCCL_NET_PLUGIN=tributary and make libnccl-net-tributary.so findable "
            "(LD_LIBRARY_PATH, or the libnccl-net-tributary package's directory in "
            "ld.so.conf), or give its full path in NCCL_NET_PLUGIN"};
  }
  std::vector<int> net, collnet;
  std::string name;
  for (int v = kNewestAbi; v >= kOldestAbi; --v) {
    void* n = dlsym(plugin.handle, ("ncclNetPlugin_v" + std::to_string(v)).c_str());
    void* c = dlsym(plugin.handle, ("ncclCollNetPlugin_v" + std::to_string(v)).c_str());
    if (n != nullptr) {
      net.push_back(v);
      // Every version's table starts with `const char* name`.
      if (name.empty() && *static_cast<const char* const*>(n) != nullptr) {
        name = *static_cast<const char* const*>(n);
      }
    }
    if (c != nullptr) collnet.push_back(v);
  }
  saw += ", resolving to " + plugin.path + " (" + (name.empty() ? "no ncclNet" : name) +
         ": ncclNet " + Range(net) + ", ncclCollNet " + Range(collnet) + ")";
  if (name != "Tributary") {
    return {kName, Verdict::kFail, saw + ": that is not Tributary's plugin",
            "NCCL_NET_PLUGIN=tributary (or the full path of libnccl-net-tributary.so)"};
  }
  if (!nccl.found || nccl.code == 0) {
    return {kName, Verdict::kWarn, saw + "; which ABI NCCL would take is unknown without it",
            "--nccl PATH to the libnccl.so.2 the job loads (a PyTorch wheel brings its own)"};
  }
  const int newest = NewestNetAbi(nccl.code);
  auto usable = [&](const std::vector<int>& versions) {
    for (int v : versions) {
      if (v <= newest) return v;  // newest first
    }
    return 0;
  };
  const int use_net = usable(net), use_collnet = usable(collnet);
  saw += "; NCCL " + VersionText(nccl.code) + " looks for v" + std::to_string(newest) +
         " down to v" + std::to_string(kOldestAbi);
  if (use_net == 0) {
    return {kName, Verdict::kFail, saw + ": no ABI version in common",
            "NCCL 2.20 or newer (the plugin exports v8 and up)"};
  }
  if (use_collnet != use_net) {
    return {kName, Verdict::kFail,
            saw + ": NCCL would take ncclNet v" + std::to_string(use_net) +
                " but no ncclCollNet of that version",
            "rebuild the plugin; every version it exports has both tables"};
  }
  return {kName, Verdict::kPass, saw + ": it will load ncclNet and ncclCollNet v" +
                                     std::to_string(use_net), ""};
}

Finding CheckNcclEnvironment(const DoctorInputs& in) {
  const char* kName = "nccl-env";
  const bool any = std::any_of(in.env.begin(), in.env.end(), [](const auto& kv) {
    return kv.first.rfind("NCCL_", 0) == 0;
  });
  if (!any && !FindNccl(in).found) {
    return {kName, Verdict::kSkip, "no NCCL_* variable and no NCCL library: not an NCCL node", ""};
  }
  std::vector<std::string> fails, warns, fixes;
  std::string seen;
  for (const char* var : {"NCCL_NET_PLUGIN", "NCCL_COLLNET_ENABLE", "NCCL_NET", "NCCL_ALGO",
                          "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_COLLNET_NODE_THRESHOLD"}) {
    if (EnvSet(in, var)) seen += std::string(seen.empty() ? "" : " ") + var + "=" + Env(in, var);
  }
  if (Env(in, "NCCL_COLLNET_ENABLE") != "1") {
    warns.push_back("NCCL_COLLNET_ENABLE is " +
                    (EnvSet(in, "NCCL_COLLNET_ENABLE") ? Env(in, "NCCL_COLLNET_ENABLE")
                                                       : std::string("unset")) +
                    ": NCCL runs its own algorithms over the plugin's point-to-point transport "
                    "and nothing is reduced in the network");
    fixes.push_back("export NCCL_COLLNET_ENABLE=1");
  }
  if (EnvSet(in, "NCCL_NET") && Lower(Env(in, "NCCL_NET")) != "tributary") {
    fails.push_back("NCCL_NET=" + Env(in, "NCCL_NET") +
                    " selects another network, and NCCL uses a plugin's CollNet only with that "
                    "plugin's own ncclNet");
    fixes.push_back("unset NCCL_NET (or NCCL_NET=Tributary)");
  }
  if (EnvSet(in, "NCCL_ALGO")) {
    // A list of algorithms NCCL may use, or with a leading ^ of those it
    // must not.
    const std::string algo = Lower(Env(in, "NCCL_ALGO"));
    const bool excludes = !algo.empty() && algo[0] == '^';
    const bool names_collnet = algo.find("collnet") != std::string::npos;
    if (excludes == names_collnet) {
      fails.push_back("NCCL_ALGO=" + Env(in, "NCCL_ALGO") + " leaves CollNet out");
      fixes.push_back("unset NCCL_ALGO, or let it allow CollNetDirect/CollNetChain");
    }
  }
  if (Env(in, "NCCL_IB_DISABLE") == "1") {
    warns.push_back("NCCL_IB_DISABLE=1: should the plugin fail to load, NCCL falls back to TCP "
                    "sockets, not InfiniBand");
    fixes.push_back("unset NCCL_IB_DISABLE unless the node has no RDMA NIC");
  }
  if (Env(in, "NCCL_P2P_DISABLE") == "1") {
    warns.push_back("NCCL_P2P_DISABLE=1 turns off NVLink/PCIe peer-to-peer inside the node: "
                    "intra-node traffic goes through host memory");
    fixes.push_back("unset NCCL_P2P_DISABLE");
  }
  std::string saw = seen.empty() ? "no NCCL_* variable set" : seen;
  for (const std::string& f : fails) saw += "; " + f;
  for (const std::string& w : warns) saw += "; " + w;
  std::string fix;
  for (const std::string& f : fixes) fix += (fix.empty() ? "" : "; ") + f;
  const Verdict verdict =
      !fails.empty() ? Verdict::kFail : !warns.empty() ? Verdict::kWarn : Verdict::kPass;
  return {kName, verdict, saw, verdict == Verdict::kPass ? "" : fix};
}

}  // namespace tributary::cli::doctor
