// The cluster spec: validation (Problems), the --cluster shorthand grammar
// [NODESx]GPUSxKIND[-FABRIC<Gbps>[/node]] and cpu:N, and LoadCluster (file or shorthand).
#include "profiles/cluster.h"
#include "profiles/cluster_presets.h"
#include "profiles/this_machine.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iterator>
#include <optional>
#include <regex>
#include <sstream>
#include <utility>

#include "model/errors.h"
#include "model/text.h"
#include "profiles/cluster_defaults.h"

namespace shardtune::profiles {
namespace {

constexpr char kGrammar[] =
    "[NODESx]GPUSxKIND[-FABRIC<Gbps>[/node]] or [NODESx]PRESET (e.g. 8xH100, 2x8xA100-80G, 4xp5; presets: "
    "shardtune gpus)";
// Bounds that catch typos, not hardware limits.
constexpr int kMaxNodes = 100000;
constexpr int kMaxGpusPerNode = 1024;
constexpr int kMaxCpuRanks = 4096;
constexpr int kMaxFabricGbps = 100000;

using model::Lower;

std::string Num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

[[noreturn]] void ShorthandError(const std::string& text, const std::string& why) {
  throw InputError(std::string("--cluster: expected ") + kGrammar + ", got \"" + text + "\"; " +
                   why);
}

// Parses a decimal count in [1, max]; `what` names it in messages ("NODES", "GPUS").
int ParseCount(const std::string& text, const std::string& digits, const std::string& what,
               int max) {
  if (digits.size() > 9 || std::stoll(digits) > max) {
    ShorthandError(text, what + " must be at most " + std::to_string(max) + ", got " + digits);
  }
  int n = std::stoi(digits);
  if (n < 1) ShorthandError(text, what + " must be >= 1, got " + digits);
  return n;
}

void AddGpuProblems(const GpuSpec& g, const std::string& where, std::vector<std::string>* out) {
  auto positive = [&](bool ok, const std::string& key, const std::string& got) {
    if (!ok) out->push_back(where + "/" + key + ": expected a number > 0, got " + got);
  };
  positive(g.marketed_memory.count() > 0, "marketed_memory_bytes",
           std::to_string(g.marketed_memory.count()));
  positive(g.usable_memory.count() > 0, "usable_memory_bytes",
           std::to_string(g.usable_memory.count()));
  positive(g.bf16_dense.count() > 0, "bf16_dense_flops_per_s", Num(g.bf16_dense.count()));
  positive(g.fp16_dense.count() > 0, "fp16_dense_flops_per_s", Num(g.fp16_dense.count()));
  positive(g.tf32_dense.count() > 0, "tf32_dense_flops_per_s", Num(g.tf32_dense.count()));
  positive(g.fp32.count() > 0, "fp32_flops_per_s", Num(g.fp32.count()));
  positive(g.memory_bandwidth.count() > 0, "memory_bytes_per_s", Num(g.memory_bandwidth.count()));
}

void AddLinkProblems(const LinkSpec& l, const std::string& where, std::vector<std::string>* out) {
  if (!(l.bandwidth_per_direction.count() > 0)) {
    out->push_back(where + "/bandwidth_per_direction_bytes_per_s: expected a number > 0, got " +
                   Num(l.bandwidth_per_direction.count()));
  }
  if (!(l.latency.count() >= 0)) {
    out->push_back(where + "/latency_s: expected a number >= 0, got " + Num(l.latency.count()));
  }
}

// The shorthand's optional "-FABRIC<Gbps>[/node]" suffix.
struct FabricSuffix {
  std::string family;  // "ib", "roce" or "eth"
  int gbps = 0;
  bool per_node = false;
};

// Splits "KIND[-FABRIC<Gbps>[/node]]" into the kind and the fabric. GPU kinds contain dashes
// ("A100-80G"), so only a last dash-separated token of the form (ib|roce|eth)<digits>[/node]
// is a fabric; another letters+digits token is an unknown fabric unless the whole text is a
// known GPU kind.
std::string SplitFabric(const std::string& text, const std::string& rest,
                        std::optional<FabricSuffix>* fabric) {
  size_t dash = rest.rfind('-');
  if (dash == std::string::npos) return rest;
  static const std::regex kTail("([A-Za-z]+)([0-9]*)(/node)?", std::regex::icase);
  std::smatch m;
  const std::string tail = rest.substr(dash + 1);
  if (!std::regex_match(tail, m, kTail)) return rest;
  const std::string family = Lower(m[1].str());
  const bool known = family == "ib" || family == "roce" || family == "eth";
  if (!known) {
    if ((m[2].length() == 0 && !m[3].matched) || LookupGpu(rest)) return rest;
    ShorthandError(text, "unknown fabric \"" + m[1].str() + "\" (expected ib, roce or eth)");
  }
  if (m[2].length() == 0) {
    if (LookupGpu(rest)) return rest;
    ShorthandError(text,
                   "fabric \"" + family + "\" needs its rate in Gb/s, e.g. -" + family + "400");
  }
  FabricSuffix f;
  f.family = family;
  f.gbps = m[2].length() > 6 ? kMaxFabricGbps + 1 : std::stoi(m[2].str());
  if (f.gbps < 1 || f.gbps > kMaxFabricGbps) {
    ShorthandError(text, "fabric rate must be in [1, " + std::to_string(kMaxFabricGbps) +
                             "] Gb/s, got " + m[2].str());
  }
  f.per_node = m[3].matched;
  *fabric = f;
  return rest.substr(0, dash);
}

ClusterSpec ParseCpuShorthand(const std::string& text) {
  static const std::regex kCpu("cpu:([0-9]{1,9})", std::regex::icase);
  std::smatch m;
  int n = 0;
  if (std::regex_match(text, m, kCpu)) n = std::stoi(m[1].str());
  if (n < 1 || n > kMaxCpuRanks) {
    throw InputError("--cluster: expected cpu:N with N in [1, " + std::to_string(kMaxCpuRanks) +
                     "] CPU ranks (e.g. cpu:4), got \"" + text + "\"");
  }
  ClusterSpec c;
  c.name = text;
  c.cpu_only = true;
  c.num_nodes = 1;
  c.gpus_per_node = n;
  // This machine: CPU ranks share its RAM and cores (issue #50; a fixed 32 GiB before).
  const MachineMemory here = ReadThisMachine();
  c.host_memory_per_node = here.read ? here.total : internal::CpuHostMemory();
  c.machine = here.read ? "this machine: " + DescribeMachine(here)
                        : "this machine's memory is unreadable (" + here.source +
                              "): assumed 32.0 GiB";
  c.gpu = internal::CpuRankSpec(n, c.host_memory_per_node, here.cpu_cores);
  c.intra_node = FindLink("loopback", "--cluster");
  c.inter_node = c.intra_node;
  c.nics_per_node = 0;
  c.nic_bandwidth = c.inter_node.bandwidth_per_direction;
  c.cpu_cores_per_node = here.cpu_cores;
  return c;
}

}  // namespace

namespace {
// A cluster file's "nccl_tuner" spellings.
constexpr std::pair<NcclTuner, const char*> kNcclTunerNames[] = {
    {NcclTuner::kNone, "none"},
    {NcclTuner::kAwsOfiP5, "aws-ofi-nccl:p5"},
    {NcclTuner::kAwsOfiP5en, "aws-ofi-nccl:p5en"},
    {NcclTuner::kAwsOfiP6, "aws-ofi-nccl:p6"}};
}  // namespace

const char* ToString(NcclTuner t) {
  for (const auto& [tuner, name] : kNcclTunerNames) {
    if (tuner == t) return name;
  }
  return "?";
}

NcclTuner ParseNcclTuner(const std::string& text, const std::string& where) {
  std::string expected;
  const size_t n = std::size(kNcclTunerNames);
  for (size_t i = 0; i < n; ++i) {
    if (text == kNcclTunerNames[i].second) return kNcclTunerNames[i].first;
    expected += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + "\"" + kNcclTunerNames[i].second + "\"";
  }
  throw InputError(where + ": expected " + expected + ", got \"" + text + "\"");
}

std::vector<std::string> ClusterSpec::Problems(const std::string& where) const {
  std::vector<std::string> p;
  auto add = [&](const std::string& key, const std::string& expected, const std::string& got) {
    p.push_back(where + "/" + key + ": expected " + expected + ", got " + got);
  };
  if (num_nodes < 1) add("nodes", "integer >= 1", std::to_string(num_nodes));
  if (gpus_per_node < 1) add("gpus_per_node", "integer >= 1", std::to_string(gpus_per_node));
  if (nics_per_node < 0 || (num_nodes > 1 && nics_per_node < 1)) {
    add("nics_per_node", num_nodes > 1 ? "integer >= 1 on more than one node" : "integer >= 0",
        std::to_string(nics_per_node));
  } else if (nics_per_node > 0 && gpus_per_node >= 1 && gpus_per_node % nics_per_node != 0 &&
             nics_per_node % gpus_per_node != 0) {
    add("nics_per_node",
        "a divisor or a multiple of gpus_per_node (" + std::to_string(gpus_per_node) + ")",
        std::to_string(nics_per_node));
  }
  if (gpus_per_host < 0 || (gpus_per_host > 0 && gpus_per_node >= 1 && gpus_per_node % gpus_per_host != 0)) {
    add("gpus_per_host",
        "0 (the node is one host) or a divisor of gpus_per_node (" + std::to_string(gpus_per_node) + ")",
        std::to_string(gpus_per_host));
  }
  if (num_nodes > 1 && !(nic_bandwidth.count() > 0)) {
    add("nic_bandwidth_bits_per_s", "a number > 0", Num(nic_bandwidth.count() * 8));
  }
  if (host_memory_per_node.count() <= 0) {
    add("host_memory_bytes_per_node", "integer > 0", std::to_string(host_memory_per_node.count()));
  }
  if (cpu_cores_per_node < 0) {
    add("cpu_cores_per_node", "integer >= 0", std::to_string(cpu_cores_per_node));
  }
  if (!(net_latency.count() >= 0 && net_latency.count() <= 1e-2)) {
    add("net_latency_us", "a number in [0, 10000] (microseconds)", Num(net_latency.count() * 1e6));
  }
  // SHARP aggregates in InfiniBand switches; RoCE and Ethernet fabrics have no CollNet for it.
  if (ib_sharp && inter_node.family != "ib") {
    add("ib_sharp", "false unless inter_node_link is an InfiniBand link (family \"ib\")",
        "true with inter_node_link " + inter_node.name + " (family \"" + inter_node.family + "\")");
  }
  AddGpuProblems(gpu, where + "/gpu", &p);
  AddLinkProblems(intra_node, where + "/intra_node_link", &p);
  if (num_nodes > 1) AddLinkProblems(inter_node, where + "/inter_node_link", &p);
  return p;
}

ClusterSpec ParseClusterShorthand(const std::string& text) {
  if (text.empty()) ShorthandError(text, "the value is empty");
  // Messages quote the text, so it must be one printable line; std::regex also recurses per
  // character. Both found by tests/fuzz.
  constexpr size_t kMaxLength = 128;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || i >= kMaxLength) {
      throw InputError(std::string("--cluster: expected ") + kGrammar +
                       ", got a value with " +
                       (i >= kMaxLength ? "more than " + std::to_string(kMaxLength) + " characters"
                                        : "a non-printable or non-ASCII byte at offset " +
                                              std::to_string(i)));
    }
  }
  if (Lower(text.substr(0, 4)) == "cpu:") return ParseCpuShorthand(text);
  // A node preset: "PRESET" (one node) or "NODESxPRESET" (cluster_presets.h).
  {
    static const std::regex kPreset("(?:([0-9]+)[xX])?([A-Za-z][A-Za-z0-9._-]*)");
    std::smatch pm;
    if (std::regex_match(text, pm, kPreset)) {
      if (const ClusterPreset* preset = LookupClusterPreset(pm[2].str())) {
        const int nodes = pm[1].matched ? ParseCount(text, pm[1].str(), "NODES", kMaxNodes) : 1;
        return ClusterFromPreset(*preset, nodes, text);
      }
    }
    static const std::regex kPresetWithGpus("[0-9]+[xX][0-9]+[xX]([A-Za-z][A-Za-z0-9._-]*)");
    if (std::regex_match(text, pm, kPresetWithGpus) && LookupClusterPreset(pm[1].str())) {
      ShorthandError(text, "preset \"" + pm[1].str() + "\" fixes its GPUs per node; write NODESx" + pm[1].str() +
                               " (e.g. 4x" + pm[1].str() + ")");
    }
  }
  static const std::regex kCounts("([0-9]+)[xX](?:([0-9]+)[xX])?(.*)");
  std::smatch m;
  if (!std::regex_match(text, m, kCounts)) {
    ShorthandError(text, text[0] == '-' ? "counts must be positive integers"
                                        : "it must start with a GPU count followed by x");
  }
  const bool two_counts = m[2].matched;
  const int nodes = two_counts ? ParseCount(text, m[1].str(), "NODES", kMaxNodes) : 1;
  const int gpus = ParseCount(text, m[two_counts ? 2 : 1].str(), "GPUS", kMaxGpusPerNode);
  const std::string rest = m[3].str();
  if (rest.empty()) ShorthandError(text, "the GPU KIND is missing after \"" + text + "\"");
  if (rest[0] == '-') ShorthandError(text, "counts must be positive integers");
  std::optional<FabricSuffix> fabric;
  const std::string kind = SplitFabric(text, rest, &fabric);
  if (!fabric && kind.find('/') != std::string::npos) {
    ShorthandError(text, "\"/node\" may only follow a fabric, e.g. -roce800/node");
  }
  const GpuSpec* gpu = LookupGpu(kind);
  if (!gpu) ShorthandError(text, UnknownGpuMessage(kind, /*list_known=*/false));

  ClusterSpec c;
  c.name = text;
  c.num_nodes = nodes;
  c.gpus_per_node = gpus;
  c.gpu = *gpu;
  c.intra_node = FindLink(gpu->intra_node_link, "--cluster " + text);
  if (fabric) {
    std::string why;
    auto link = internal::FabricLink(fabric->family, fabric->gbps, &why);
    if (!link) ShorthandError(text, why);
    c.inter_node = *link;
    c.nics_per_node = nodes > 1 ? (fabric->per_node ? 1 : gpus) : 0;
  } else {
    c.inter_node = FindLink(gpu->default_fabric, "--cluster " + text);
    c.nics_per_node = internal::DefaultNicsPerNode(c.intra_node, gpus, nodes);
  }
  c.nic_bandwidth = c.inter_node.bandwidth_per_direction;
  const internal::NodeDefaults node = internal::DefaultNode(gpu->name, gpus);
  c.host_memory_per_node = node.host_memory;
  c.cpu_cores_per_node = node.cpu_cores;
  c.gpus_per_host = node.gpus_per_host;
  if (node.gpus_per_host > 0 && gpus % node.gpus_per_host != 0) {
    ShorthandError(text, "a " + gpu->name + " NVLink domain is built from hosts of " +
                             std::to_string(node.gpus_per_host) + " GPUs (compute trays): GPUS must be 1-" +
                             std::to_string(node.gpus_per_host) + " or a multiple of " +
                             std::to_string(node.gpus_per_host) + ", got " + std::to_string(gpus));
  }
  auto problems = c.Problems("--cluster " + text);
  SHARDTUNE_CHECK(problems.empty()) << problems.front();
  return c;
}

ClusterSpec LoadCluster(const std::string& arg) {
  std::error_code ec;
  const bool json_name = arg.size() > 5 && Lower(arg.substr(arg.size() - 5)) == ".json";
  // A missing *.json is reported as a missing file, not as a malformed shorthand.
  if (std::filesystem::is_regular_file(arg, ec) || json_name) return ReadClusterFile(arg);
  return ParseClusterShorthand(arg);
}

}  // namespace shardtune::profiles
