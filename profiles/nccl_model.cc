// NCCL's channel search (closed form) and tuning model. Citations are file:line in NVIDIA/nccl
// at commit 5067397c (2.30.7); profiles/nccl_model_notes.md explains each rule.
#include "profiles/nccl_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "model/errors.h"

namespace shardtune::profiles {
namespace {

constexpr int kAlgos = 7, kProtos = 3;
constexpr int kRing = 0, kTree = 1, kNvls = 2, kNvlsTree = 3, kPat = 4, kCollNetDirect = 5, kCollNetChain = 6;
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
static_assert(static_cast<int>(NcclAlgo::kPat) == kPat && static_cast<int>(TunerAlgo::kPat) == kPat &&
                  static_cast<int>(NcclAlgo::kCollNetDirect) == kCollNetDirect &&
                  static_cast<int>(NcclAlgo::kCollNetChain) == kCollNetChain &&
                  static_cast<int>(TunerAlgo::kNvlsTree) == kNvlsTree && static_cast<int>(TunerAlgo::kTree) == kTree,
              "the table's algorithm indices are NcclAlgo's and TunerAlgo's");
static_assert(static_cast<int>(TunerProto::kSimple) == kSimple && static_cast<int>(NcclProto::kLL128) == kLL128,
              "the table's protocol indices are NcclProto's and TunerProto's");

// ringGraph->maxChannels = MAXCHANNELS / 2 (init.cc:1177, MAXCHANNELS 64 in device.h:91).
constexpr int kMaxSearchChannels = 32;
// NCCL_MAX_NVLS_ARITY (device.h): the most NVLS heads.
constexpr int kMaxNvlsHeads = 32;
// NCCL_MAX_DIRECT_ARITY + 1 (device.h: 7 + 1): the most CollNetDirect heads (search.cc:1129-1131),
// and the most GPUs per node CollNetDirect and CollNetChain run on (enqueue.cc:2000-2003).
constexpr int kMaxCollNetLocalRanks = 8;

// Per-channel speeds the search tries, GB/s (search.cc:1052-1066).
const std::vector<double> kSpeedIntra = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0};
const std::vector<double> kSpeedInter = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                                         7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
const std::vector<double> kSm90SpeedIntra = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0};
const std::vector<double> kSm90SpeedInter = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                             15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
const std::vector<double> kSm100SpeedIntra = {90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0};
const std::vector<double> kSm100SpeedInter = {96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0,
                                              20.0, 17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};

const std::vector<double>& Speeds(const NcclCommShape& s) {
  const bool inter = s.nodes > 1;
  if (s.compute_capability >= 100) return inter ? kSm100SpeedInter : kSm100SpeedIntra;
  if (s.compute_capability >= 90) return inter ? kSm90SpeedInter : kSm90SpeedIntra;
  return inter ? kSpeedInter : kSpeedIntra;
}

// How many times `s` can be subtracted from `bw`, as the search does (SUB_ROUND, search.cc:117).
int Fits(double bw, double s) {
  if (s <= 0) return 0;
  return static_cast<int>(std::floor(bw / s + 1e-9));
}

// Channels the node's NICs and the PCIe links to them admit at per-channel speed s: a channel
// takes s from the NIC it enters by (search.cc:739-750) and from the PCIe link of the GPU on
// that NIC's switch; NCCL's default crossNic=2 pairs channels so that each also leaves by a NIC
// of its own rail (search.cc:603, connect.cc:404-414), and one NIC per node is reached by the
// other GPUs over NVLink to the GPU beside it (PXN, paths.cc:812-841), so the entry side binds.
int NetChannels(const NcclCommShape& sh, double s) {
  bool any_local = false;
  for (const auto& sw : sh.switches) any_local |= sw.gpus > 0 && sw.nics > 0;
  int total = 0;
  for (const auto& sw : sh.switches) {
    if (sw.nics == 0) continue;
    if (any_local && sw.gpus == 0) continue;  // another rail's NIC: not used while local ones exist
    const int gpus = sw.gpus > 0 ? sw.gpus : sh.ranks_per_node;  // reached through the CPU
    total += std::min(sw.nics * Fits(sh.nic_GBps, s), gpus * Fits(sh.pcie_GBps, s));
  }
  // One GPU per node: every channel enters and leaves through that GPU's PCIe link.
  if (sh.ranks_per_node == 1) total = std::min(total, Fits(sh.pcie_GBps, s));
  return total;
}

// Channels NVLink admits: inside one node a ring's every GPU forwards each channel to the next;
// across nodes all but the GPU that hands the channel to the NIC do, so with channels rotated
// over the GPUs each carries (ppn-1)/ppn of them (nccl_model_notes.md 1.4: 8 x 48 on an H100).
int NvlinkChannels(const NcclCommShape& sh, double s) {
  if (sh.ranks_per_node <= 1) return std::numeric_limits<int>::max();
  if (sh.nodes == 1) return Fits(sh.nvlink_GBps, s);
  const double per_channel = s * (sh.ranks_per_node - 1) / sh.ranks_per_node;
  return Fits(sh.nvlink_GBps, per_channel);
}

int RingChannels(const NcclCommShape& sh, double s) {
  int n = NvlinkChannels(sh, s);
  if (sh.nodes > 1) n = std::min(n, NetChannels(sh, s));
  return std::min(n, kMaxSearchChannels);
}

// system->maxBw: the best GPU->NET path on several nodes, else the best GPU->GPU path;
// system->totalBw: a GPU's NVLink sum or its PCIe link, the larger (search.cc:30-54).
double MaxBw(const NcclCommShape& sh) {
  if (sh.nodes == 1) return sh.nvlink_GBps;
  double best = 0;
  for (const auto& sw : sh.switches) {
    if (sw.nics > 0) best = std::max(best, std::min(sh.pcie_GBps, sh.nic_GBps));
  }
  return best;
}
double TotalBw(const NcclCommShape& sh) { return std::max(sh.nvlink_GBps, sh.pcie_GBps); }

size_t StartIndex(const std::vector<double>& speeds, double max_bw, double total_bw) {
  size_t i = 0;
  while (i + 1 < speeds.size() && (speeds[i] > max_bw || speeds[i] > total_bw)) ++i;
  return i;
}

// ncclTopoCompute for the RING pattern (search.cc:1074-1313): pass 1 keeps the graph with the
// most channels x bandwidth while lowering the speed (stopping once it reaches totalBw or the
// next speed falls under .49 of the best); ncclTopoDupChannels (search.cc:1036-1049); pass 2
// raises the speed while the channels still fit.
NcclGraph SearchRing(const NcclCommShape& sh) {
  const auto& speeds = Speeds(sh);
  const double max_bw = MaxBw(sh), total_bw = TotalBw(sh);
  size_t i = StartIndex(speeds, max_bw, total_bw);
  int best_n = 0;
  double best_s = 0;
  for (;;) {
    const int c = RingChannels(sh, speeds[i]);
    if (c > 0 && c * speeds[i] > best_n * best_s) {
      best_n = c;
      best_s = speeds[i];
    }
    if (best_n > 0 && best_n * best_s >= total_bw) break;
    if (i + 1 >= speeds.size()) break;
    if (best_n > 0 && speeds[i + 1] / best_s <= 0.49) break;
    ++i;
  }
  NcclGraph g;
  if (best_n == 0) {
    // "Could not find a path ... falling back to simple order" (search.cc:1295-1300).
    g.channels = 1;
    g.bw_intra_GBps = g.bw_inter_GBps = 0.1;
    return g;
  }
  if (best_s >= 25.0 && !(sh.compute_capability > 80 && best_s < 50.0 && best_n > 4)) {
    const int dup = std::min(best_n * 2, kMaxSearchChannels);
    best_s /= (dup + best_n - 1) / best_n;
    best_n = dup;
  }
  size_t j = 0;
  while (j + 1 < speeds.size() && speeds[j] > best_s) ++j;
  while (j > 0) {
    const int c = RingChannels(sh, speeds[j - 1]);
    if (c < best_n) break;
    --j;
    best_n = c;
    best_s = speeds[j];
  }
  g.channels = best_n;
  g.bw_intra_GBps = g.bw_inter_GBps = best_s;
  return g;
}

// The tree graph: BALANCED_TREE, or TREE on Hopper and later when no NIC has two GPUs on its
// switch (search.cc:1215-1219); as many channels as the ring (init.cc:1184-1185); pass 2 raises
// bwIntra while it is under twice bwInter and NVLink still carries it (search.cc:1279-1282).
NcclGraph SearchTree(const NcclCommShape& sh, const NcclGraph& ring) {
  const auto& speeds = Speeds(sh);
  NcclGraph g;
  g.channels = ring.channels;
  bool balanced = false;
  for (const auto& sw : sh.switches) balanced |= sw.nics > 0 && sw.gpus >= 2;
  g.tree_pattern = sh.ranks_per_node == 1 || (sh.nodes > 1 && sh.compute_capability >= 90 && !balanced);
  // A tree channel's chain inside a node has ppn-1 hops, as a multi-node ring's.
  auto intra_fits = [&](double s) {
    if (sh.ranks_per_node <= 1) return true;
    return Fits(sh.nvlink_GBps, s * (sh.ranks_per_node - 1) / sh.ranks_per_node) >= ring.channels;
  };
  auto fits = [&](double s) { return intra_fits(s) && (sh.nodes == 1 || NetChannels(sh, s) >= ring.channels); };
  size_t i = StartIndex(speeds, MaxBw(sh), TotalBw(sh) * (sh.ranks_per_node > 1 ? 1.0 * sh.ranks_per_node / (sh.ranks_per_node - 1) : 1.0));
  while (i + 1 < speeds.size() && !fits(speeds[i])) ++i;
  if (!fits(speeds[i])) return ring;  // NCCL falls back likewise; keep the ring's figures
  g.bw_inter_GBps = g.bw_intra_GBps = speeds[i];
  while (i > 0 && g.bw_intra_GBps < 2 * g.bw_inter_GBps && intra_fits(speeds[i - 1])) {
    --i;
    g.bw_intra_GBps = speeds[i];
  }
  return g;
}

// Heads of the NVLS and COLLNET_DIRECT searches across nodes: one per NIC with a GPU of its own
// (search.cc:754-773: the NIC's localGpu, no GPU twice), at most the node's GPUs and `most`.
int NicHeads(const NcclCommShape& sh, int most) {
  int heads = 0;
  for (const auto& sw : sh.switches) heads += std::min(sw.gpus, sw.nics);
  return std::min({heads, sh.ranks_per_node, most});
}

// The NVLS graph (search.cc:1124-1128, :410-440, :754-773): one head per NIC with a distinct
// local GPU across nodes, every GPU on one node; each GPU's NVLink carries the speed once per
// head and once more for its own head, so (heads+1) x bwIntra <= NVLink; pass 2 raises bwInter
// while it is under twice bwIntra and the NIC path carries it (search.cc:1274-1278).
NcclGraph SearchNvls(const NcclCommShape& sh) {
  NcclGraph g;
  if (!sh.nvls || !sh.nvswitch || sh.compute_capability < 90 || sh.ranks_per_node < 2) return g;
  const int heads = sh.nodes == 1 ? std::min(sh.ranks_per_node, kMaxNvlsHeads) : NicHeads(sh, kMaxNvlsHeads);
  if (heads < 2) return g;
  const auto& speeds = Speeds(sh);
  const double path = sh.nodes > 1 ? std::min(sh.pcie_GBps, sh.nic_GBps) : std::numeric_limits<double>::max();
  size_t i = StartIndex(speeds, MaxBw(sh), TotalBw(sh));
  auto fits = [&](double s) { return (heads + 1) * s <= sh.nvlink_GBps + 1e-9 && s <= path + 1e-9; };
  while (i + 1 < speeds.size() && !fits(speeds[i])) ++i;
  if (!fits(speeds[i])) return g;
  g.channels = heads;
  g.bw_intra_GBps = g.bw_inter_GBps = speeds[i];
  while (i > 0 && g.bw_inter_GBps < 2 * g.bw_intra_GBps && speeds[i - 1] <= path + 1e-9) {
    --i;
    g.bw_inter_GBps = speeds[i];
  }
  return g;
}

// CollNet needs NCCL_COLLNET_ENABLE with a CollNet plugin, two nodes or more
// (NCCL_COLLNET_NODE_THRESHOLD, init.cc:1468-1475) and at most eight GPUs per node
// (enqueue.cc:2000-2003).
bool CollNetRuns(const NcclCommShape& sh) {
  return sh.collnet && sh.nodes >= 2 && sh.ranks_per_node <= kMaxCollNetLocalRanks;
}

// The COLLNET_DIRECT graph (search.cc:373-407, :730-773, :1129-1131): heads as NVLS's, one per
// NIC with a GPU of its own (at most 8); each head exchanges with every other GPU of the node at
// bwIntra / (ppn-1) in both directions (mul = 1/(ngpus-1)), so a head's NVLink carries bwIntra for
// its own head and bwIntra / (ppn-1) for each other head. Its NIC path carries bwInter. Pass 2
// raises bwIntra while it is under twice bwInter (search.cc:1279-1282). One GPU per node: the
// search runs it as a tree of one channel (search.cc:1133). Disabled without NVSwitches
// (tuning.cc:508-509).
NcclGraph SearchCollNetDirect(const NcclCommShape& sh) {
  NcclGraph g;
  if (!CollNetRuns(sh) || (sh.ranks_per_node > 1 && !sh.nvswitch)) return g;
  const int heads = NicHeads(sh, kMaxCollNetLocalRanks);
  if (heads < 1) return g;
  const auto& speeds = Speeds(sh);
  const double path = std::min(sh.pcie_GBps, sh.nic_GBps);
  auto intra_fits = [&](double s) {
    if (sh.ranks_per_node <= 1) return true;
    return s * (1.0 + (heads - 1.0) / (sh.ranks_per_node - 1.0)) <= sh.nvlink_GBps + 1e-9;
  };
  auto fits = [&](double s) { return intra_fits(s) && s <= path + 1e-9; };
  size_t i = StartIndex(speeds, MaxBw(sh), TotalBw(sh));
  while (i + 1 < speeds.size() && !fits(speeds[i])) ++i;
  if (!fits(speeds[i])) return g;
  g.channels = heads;
  g.bw_intra_GBps = g.bw_inter_GBps = speeds[i];
  while (i > 0 && g.bw_intra_GBps < 2 * g.bw_inter_GBps && intra_fits(speeds[i - 1])) {
    --i;
    g.bw_intra_GBps = speeds[i];
  }
  return g;
}

// tuning.cc:137-233, the default tuner constants. Indices: [algo][proto] with algo Tree, Ring,
// CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT in kAlgos order Ring, Tree, NVLS, NVLSTree,
// PAT, CollNetDirect, CollNetChain below.
struct Constants {
  double base_lat[kAlgos][kProtos];
  double hw_lat[3][kAlgos][kProtos];  // NVLINK, PCI, NET
};
constexpr Constants kConst = {
    // baseLatencies: Ring {6.6, 14.0, 8.4}, Tree {6.8, 14.0, 8.4}, NVLS and NVLSTree 0, PAT 8.0,
    // CollNetDirect and CollNetChain 0.
    {{6.6, 14.0, 8.4}, {6.8, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}, {8.0, 8.0, 8.0}, {0, 0, 0}, {0, 0, 0}},
    {
        // NVLINK: Ring {.6, 1.9, 3.4}, Tree {.6, 1.25, 4.0}, NVLS {0, 0, 25}, NVLSTree {0, 0, 25},
        // PAT {0, 0, 4.0}, CollNetDirect {0, 0, 3.7}, CollNetChain {0, 0, 2.8}
        {{0.6, 1.9, 3.4}, {0.6, 1.25, 4.0}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4.0}, {0, 0, 3.7}, {0, 0, 2.8}},
        // PCI: Ring {1.0, 2.5, 5.7}, Tree {1.0, 1.9, 4.0}, PAT {0, 0, 4.0}, CollNetDirect
        // {0, 0, 3.7}, CollNetChain {0, 0, 2.8}
        {{1.0, 2.5, 5.7}, {1.0, 1.9, 4.0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}, {0, 0, 3.7}, {0, 0, 2.8}},
        // NET: Ring {2.7, 4.0, 14.0}, Tree {5.0, 8.5, 14}, NVLS {0, 0, 18}, NVLSTree {0, 0, 20.9},
        // PAT {0, 0, 14}, CollNetDirect {0, 0, 31}, CollNetChain {0, 0, 30}
        {{2.7, 4.0, 14.0}, {5.0, 8.5, 14.0}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14.0}, {0, 0, 31}, {0, 0, 30}},
    }};
// [compCapIndex Volta, Ampere, Hopper, Blackwell][N1, N2, N4+]
constexpr double kLlMaxBws[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
constexpr double kPerChMaxRingLL128Bws[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
constexpr double kPerChMaxTreeLL128Bws[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChMaxTreeBws[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
constexpr double kPerChMaxNVLSTreeBws[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}};
constexpr double kNvlsEfficiency[4] = {0.0, 0.0, 0.85, 0.74};
// treeCorrectionFactor[proto][log2(size / 64)] (tuning.cc:623-631).
constexpr double kTreeCorrection[kProtos][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};
// getNetOverhead for an Intel x86 host: 1 us (tuning.cc:222-227); AMD hosts have 2.
constexpr double kNetOverheadUs = 1.0;

int Log2i(int64_t n) {
  int l = 0;
  while (n >>= 1) ++l;
  return l;
}

int CompCapIndex(int cc) { return cc >= 100 ? 3 : cc >= 90 ? 2 : cc >= 80 ? 1 : 0; }

int CollIndex(Collective c) {
  switch (c) {
    case Collective::kAllGather: return 0;
    case Collective::kReduceScatter: return 1;
    case Collective::kAllReduce: return 2;
    default: break;
  }
  SHARDTUNE_CHECK(false) << "NCCL's tuning model covers all-gather, reduce-scatter and all-reduce, not "
                         << model::ToString(c);
  return 0;
}

double PcieGBpsOf(const std::string& link) {
  // NCCL's PCIe link bandwidth, x16: width x {60, 120, 240} / 80 for 8, 16 and 32 GT/s.
  if (link == "pcie3") return 12.0;
  if (link == "pcie4") return 24.0;
  if (link == "pcie5") return 48.0;
  return 0.0;
}

// ncclTopoNVLinkBw (topo.h:19-24): the per-link figure NCCL counts, by SM version.
double NvlinkPerLinkGBps(int cc) {
  if (cc >= 100) return 40.1;
  if (cc >= 90) return 20.6;
  if (cc == 86) return 12.0;
  if (cc >= 70) return 20.0;
  return 18.0;
}

}  // namespace

const char* ToString(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::kRing: return "ring";
    case NcclAlgo::kTree: return "tree";
    case NcclAlgo::kNvls: return "nvls";
    case NcclAlgo::kNvlsTree: return "nvls_tree";
    case NcclAlgo::kPat: return "pat";
    case NcclAlgo::kCollNetDirect: return "collnet_direct";
    case NcclAlgo::kCollNetChain: return "collnet_chain";
  }
  return "?";
}

const char* ToString(NcclProto p) {
  switch (p) {
    case NcclProto::kLL: return "LL";
    case NcclProto::kLL128: return "LL128";
    case NcclProto::kSimple: return "Simple";
  }
  return "?";
}

NcclGraphs SearchNcclGraphs(const NcclCommShape& sh) {
  SHARDTUNE_CHECK(sh.nodes >= 1 && sh.ranks_per_node >= 1 && sh.pcie_GBps > 0) << "invalid NCCL comm shape";
  if (sh.nodes > 1) {
    bool nic = false;
    for (const auto& sw : sh.switches) nic |= sw.nics > 0;
    SHARDTUNE_CHECK(nic && sh.nic_GBps > 0) << "a communicator across nodes needs a NIC";
  }
  NcclGraphs g;
  g.ring = SearchRing(sh);
  g.tree = SearchTree(sh, g.ring);
  g.nvls = SearchNvls(sh);
  if (CollNetRuns(sh)) {
    // CollNetChain: pattern TREE with the ring's channel count (init.cc:1189-1194); its search
    // is the tree's on the same NICs (the SHARP plugin's devices are the IB NICs).
    g.collnet_chain = SearchTree(sh, g.ring);
    g.collnet_chain.tree_pattern = true;
    g.collnet_direct = SearchCollNetDirect(sh);
  }
  // comm->nChannels = treeGraph->nChannels = ringGraph->nChannels = min of the two (init.cc:1459).
  g.ring.channels = g.tree.channels = std::min(g.ring.channels, g.tree.channels);
  return g;
}

// ncclTopoTuneModel (tuning.cc:243-519) for all-gather, reduce-scatter and all-reduce.
NcclComm::NcclComm(const NcclCommShape& shape) : shape_(shape), graphs_(SearchNcclGraphs(shape)) {
  if (shape.tuner != NcclTuner::kNone) {
    auto t = std::make_shared<const AwsOfiRegionTuner>(shape.tuner, shape.nodes * shape.ranks_per_node, shape.nodes);
    if (t->active()) tuner_ = std::move(t);
  }
  const int nodes = shape.nodes, ranks = shape.nodes * shape.ranks_per_node;
  const double ppn = shape.ranks_per_node;
  const int cci = CompCapIndex(shape.compute_capability);
  const int index2 = nodes <= 2 ? nodes - 1 : 2;
  const int index1 = nodes == 1 ? cci : 0;  // multi-node: the CPU row (Intel x86 assumed)
  const double ll_max = kLlMaxBws[index1][index2];
  // PAT runs on the tree graph (init.cc:980).
  const NcclGraph* graph[kAlgos] = {&graphs_.ring, &graphs_.tree,           &graphs_.nvls,         &graphs_.nvls,
                                    &graphs_.tree, &graphs_.collnet_direct, &graphs_.collnet_chain};
  const bool collnet = CollNetRuns(shape);
  // typeIntra: NVLink between the communicator's GPUs, else PCI (a lone GPU per node: PATH_LOC).
  const int intra_hw = shape.ranks_per_node > 1 && shape.nvlink_GBps > 0 ? 0 : 1;
  const int hw_net = 2;
  // LL128: on Hopper and later when typeInter <= PXN; before, typeInter <= PXB, which DGX A100
  // rings leave through PXN exits (nccl_model_notes.md 1.4); typeIntra must be NVLink
  // (tuning.cc:520-531). One GPU per node has no intra-node hop to disqualify.
  bool rail_pxn = nodes > 1 && shape.compute_capability < 90;
  for (const auto& sw : shape.switches) rail_pxn &= sw.gpus <= 1;
  const bool ll128 = (shape.ranks_per_node == 1 || shape.nvlink_GBps > 0) && !rail_pxn;

  for (int coll = 0; coll < 3; ++coll) {
    const bool ar = coll == 2;
    const int nsteps = ar ? 2 * (ranks - 1) : ranks - 1;
    for (int a = 0; a < kAlgos; ++a) {
      for (int p = 0; p < kProtos; ++p) {
        Entry& e = table_[coll][a][p];
        e = Entry{};
        // All-gather and reduce-scatter run PAT, Ring, NVLS and CollNetDirect (tuning.cc:298-300).
        if (!ar && (a == kTree || a == kNvlsTree || a == kCollNetChain)) continue;
        // CollNet runs Simple only (tuning.cc:338-339).
        if ((a == kCollNetDirect || a == kCollNetChain) && p != kSimple) continue;
        // PAT: all-gather and reduce-scatter, Simple, one GPU per node, SM60 on (ncclPatEnable,
        // tuning.cc:215-223, :298-303).
        if (a == kPat && (ar || p != kSimple || shape.ranks_per_node != 1 || shape.compute_capability < 60)) continue;
        if ((a == kNvls || a == kNvlsTree) && p != kSimple) continue;
        if (a == kNvlsTree && nodes == 1) continue;   // "Disable NVLS Tree on a single node"
        if (a == kNvls && nodes > 1 && !collnet) continue;  // NVLS across nodes needs CollNet (tuning.cc:503-506)
        if (p == kLL128 && !ll128) continue;
        const NcclGraph& g = *graph[a];
        if (g.channels == 0) continue;
        const bool collnet_algo = a == kCollNetDirect || a == kCollNetChain;
        double bw = nodes <= 2 || collnet_algo ? g.bw_intra_GBps : g.bw_inter_GBps;
        if (a == kNvls || a == kNvlsTree) {
          if (g.channels < 2) continue;
          double intra = g.bw_intra_GBps * kNvlsEfficiency[cci] * (g.channels - 1) / g.channels;
          intra *= ar ? 2.0 : (ppn - 1) / ppn;
          const double inter = g.bw_inter_GBps * (nodes <= 2 && a == kNvlsTree ? 2 : 1);
          bw = std::min({intra, inter, a == kNvlsTree ? kPerChMaxNVLSTreeBws[cci][index2] : std::numeric_limits<double>::max()});
        }
        double bus = g.channels * bw;
        if (a == kRing && p == kLL) bus = std::min(ll_max, bus * 0.5);
        if (a == kRing && p == kLL128) bus = std::min(bus * 0.92, g.channels * kPerChMaxRingLL128Bws[cci][index2]);
        if (a == kTree) bus = std::min(bus * 0.92, g.channels * kPerChMaxTreeBws[cci][index2]);
        if (a == kTree && p == kLL) bus = std::min(bus / 3.8, ll_max);
        if (a == kTree && p == kLL128) {
          bus = std::min(bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), g.channels * kPerChMaxTreeLL128Bws[cci][index2]);
        }
        if (a == kTree && g.tree_pattern) bus *= 0.85;
        if (a == kPat) bus *= 0.75;
        if (a == kCollNetDirect) {
          if (!ar) {
            bus = ppn * std::min(g.bw_intra_GBps, g.bw_inter_GBps * 0.9);
          } else {
            // "Collnet+Direct requires all GPUs to have a local NIC to work at full speed"
            // (tuning.cc:343-348): the GPU/NIC ratio, halfway to 1, divides the bandwidth.
            double factor = ppn / g.channels;
            factor -= (factor - 1) / 2;
            bus /= factor;
            if (shape.compute_capability >= 90) bus *= 0.85;
          }
        }
        // All-gather and reduce-scatter by NVLS or CollNetDirect across nodes need the CollNet
        // plugin's iallgather/ireducescatter (the SHARP plugin has both, sharp_plugin.c) and no
        // more GPUs on a node than CollNet heads: "AllGather/ReduceScatter requires 1:1 GPU:NIC"
        // (tuning.cc:351-373).
        if ((a == kNvls || a == kCollNetDirect) && !ar && nodes > 1 &&
            (!collnet || shape.ranks_per_node > graphs_.collnet_direct.channels)) {
          continue;
        }
        // Bus to algorithm bandwidth (tuning.cc:376-382): rings and NVLS all-reduce by
        // nRanks/nsteps, trees and CollNet by 1/2; all-gather/reduce-scatter other than ring's are
        // stored as they are.
        if (!(a != kRing && !ar)) {
          bus *= (a == kRing || a == kNvls || a == kNvlsTree) ? 1.0 * ranks / nsteps : 0.5;
        }
        if (bus <= 0) continue;
        e.alg_bw_GBps = bus;

        double lat = kConst.base_lat[a][p];
        double intra_lat = kConst.hw_lat[intra_hw][a][p];
        // With ppn=1 latencies are fully exposed: the Tree network latency (tuning.cc:387).
        double inter_lat = shape.ranks_per_node == 1 ? kConst.hw_lat[hw_net][kTree][p] : kConst.hw_lat[hw_net][a][p];
        // The net plugin's latency, twice for Simple: "Also add the flush extra latency"
        // (tuning.cc:389-391; graph->latencyInter = the NIC's property, search.cc:745).
        inter_lat += shape.net_latency_us * (p == kSimple ? 2 : 1);
        if (a == kRing) {
          // "Inter-node rings still have to launch nsteps * net overhead" (tuning.cc:402-412).
          double net_overhead = nodes > 1 ? kNetOverheadUs * (p == kSimple ? 3 : 1) : 0;
          intra_lat = std::max(intra_lat, net_overhead);
          const int inter_steps = nodes == 1 ? 0 : ar ? 2 * (nodes - 1) : nodes - 1;
          lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
        } else if (a == kTree) {
          lat += 2 * ((ppn - 1) * intra_lat + Log2i(nodes) * inter_lat);
        } else if (a == kCollNetDirect) {
          // "Add 0.4 us arity serialization latency" (tuning.cc:418-421).
          lat += 2 * (std::min(1.0, ppn - 1) * intra_lat + (ppn - 1) * 0.4) + inter_lat;
        } else if (a == kCollNetChain) {
          lat += 2 * (ppn - 1) * intra_lat + inter_lat;  // tuning.cc:422-423
        } else if (a == kNvls) {
          lat = intra_lat + (nodes > 1 ? inter_lat : 0);
        } else if (a == kPat) {
          // "Log latency" plus "still a linear part" (tuning.cc:429-433).
          lat += Log2i(nodes) * (inter_lat / 3.5) + ranks * 2.8;
        } else {
          lat += intra_lat + 2 * Log2i(nodes) * inter_lat;
        }
        e.latency_us = lat;
      }
    }
  }
}

// Whether NCCL's cost table has (a, p) for this call: enabled by the model; PAT's reduce-scatter
// only for a plain sum (enqueue.cc:2009-2012); NVLS and NVLS tree reduce a sum, not a scaled sum
// (nvlsSupport, enqueue.cc:425-426 and :2004-2007; ncclNvlsSupported).
bool NcclComm::Enabled(Collective c, int a, int p, NcclReduceOp op) const {
  if (table_[CollIndex(c)][a][p].alg_bw_GBps <= 0) return false;
  if (op != NcclReduceOp::kScaled || c == Collective::kAllGather) return true;
  if (a == kNvls || a == kNvlsTree) return false;
  return !(a == kPat && c == Collective::kReduceScatter);
}

// ncclTopoGetAlgoTime (tuning.cc:633-655): NCCL's estimate for (a, p), time and bus bandwidth set.
NcclCollectiveCost NcclComm::Estimate(Collective c, int64_t bytes, int a, int p) const {
  const int coll = CollIndex(c);
  const int ranks = this->ranks();
  const Entry& e = table_[coll][a][p];
  double bw = e.alg_bw_GBps, lat = e.latency_us;
  const int log_size = Log2i(bytes >> 6);
  if (a == kTree && coll == 2 && log_size >= 0 && log_size < 23) bw *= kTreeCorrection[p][log_size];
  // The same correction for NVLS tree on Blackwell with an x86 host (tuning.cc:643-646).
  if (a == kNvlsTree && coll == 2 && log_size >= 0 && log_size < 24 && shape_.compute_capability >= 100 &&
      shape_.x86_host) {
    bw *= kTreeCorrection[p][log_size];
  }
  // Runtime channels are twice the search's (ncclTopoPostset, connect.cc:460).
  const int64_t runtime_channels = 2LL * graphs_.ring.channels;
  if (a == kRing && p == kSimple && shape_.nodes > 1 && coll == 2 && bytes / (runtime_channels * ranks) >= 64) {
    lat *= shape_.compute_capability < 80 ? 1.9 : 1.4;  // "Plateau effect of ring"
  }
  NcclCollectiveCost out;
  out.algo = static_cast<NcclAlgo>(a);
  out.proto = static_cast<NcclProto>(p);
  out.channels = (a == kNvls || a == kNvlsTree) ? graphs_.nvls.channels
                 : a == kCollNetDirect          ? graphs_.collnet_direct.channels
                 : a == kCollNetChain           ? graphs_.collnet_chain.channels
                                                : graphs_.ring.channels;
  out.alg_bw_GBps = bw;
  out.latency = Seconds::Micros(lat);
  out.time = Seconds::Micros(lat + static_cast<double>(bytes) / (1000.0 * bw));
  out.bus_bandwidth = BytesPerSecond::Of(bw * 1e9 * BusBwFactor(c, ranks));
  return out;
}

std::optional<NcclCollectiveCost> NcclComm::CostOf(Collective c, Bytes size, NcclAlgo algo, NcclProto proto,
                                                   NcclReduceOp op) const {
  const int a = static_cast<int>(algo), p = static_cast<int>(proto);
  if (!Enabled(c, a, p, op)) return std::nullopt;
  return Estimate(c, std::max<int64_t>(1, size.count()), a, p);
}

NcclCollectiveCost NcclComm::Cost(Collective c, Bytes size, NcclReduceOp op) const {
  const int64_t bytes = std::max<int64_t>(1, size.count());
  // The tuner plugin runs first and sets its region's cost to 0 (enqueue.cc:2139-2148), so NCCL
  // runs that entry; the time is still NCCL's estimate of it.
  if (tuner_) {
    auto choice = tuner_->Choose(c, bytes, [&](TunerAlgo ta, TunerProto tp) {
      return Enabled(c, static_cast<int>(ta), static_cast<int>(tp), op);
    });
    if (choice) {
      NcclCollectiveCost picked = Estimate(c, bytes, static_cast<int>(choice->algo), static_cast<int>(choice->proto));
      picked.by_tuner = true;
      return picked;
    }
  }
  std::optional<NcclCollectiveCost> best;
  for (int a = 0; a < kAlgos; ++a) {
    for (int p = 0; p < kProtos; ++p) {
      if (!Enabled(c, a, p, op)) continue;
      NcclCollectiveCost candidate = Estimate(c, bytes, a, p);
      if (!best || candidate.time.count() < best->time.count()) best = candidate;
    }
  }
  SHARDTUNE_CHECK(best.has_value()) << "NCCL's model enables no algorithm for " << model::ToString(c);
  return *best;
}

BytesPerSecond NcclComm::AsymptoticBusBandwidth(Collective c) const {
  return Cost(c, Bytes::Of((int64_t{1} << 30) * ranks())).bus_bandwidth;
}

bool NcclModelApplies(const ClusterSpec& cluster, const std::vector<int>& ranks) {
  if (cluster.cpu_only || ranks.size() < 2 || cluster.gpus_per_node < 1) return false;
  if (PcieGBpsOf(cluster.gpu.host_link) <= 0 || cluster.gpu.compute_capability <= 0) return false;
  std::vector<int> per_node(static_cast<size_t>(cluster.num_nodes), 0);
  for (int r : ranks) {
    if (r < 0 || r >= cluster.world_size()) return false;
    ++per_node[static_cast<size_t>(r / cluster.gpus_per_node)];
  }
  int ppn = 0, nodes = 0;
  for (int n : per_node) {
    if (n == 0) continue;
    if (ppn != 0 && n != ppn) return false;
    ppn = n;
    ++nodes;
  }
  if (ppn > 1 && !(cluster.intra_node.family == "nvlink" && cluster.intra_node.nvlink_links > 0)) return false;
  if (nodes > 1 && (cluster.nics_per_node < 1 || !(cluster.nic_bandwidth.count() > 0))) return false;
  return true;
}

NcclCommShape NcclShapeOf(const ClusterSpec& cluster, const std::vector<int>& ranks) {
  SHARDTUNE_CHECK(NcclModelApplies(cluster, ranks)) << "NCCL's model does not describe this group";
  NcclCommShape sh;
  const int g = cluster.gpus_per_node;
  std::set<int> nodes;
  for (int r : ranks) nodes.insert(r / g);
  sh.nodes = static_cast<int>(nodes.size());
  sh.ranks_per_node = static_cast<int>(ranks.size()) / sh.nodes;
  sh.compute_capability = cluster.gpu.compute_capability;
  if (cluster.intra_node.family == "nvlink") {
    sh.nvlink_GBps = cluster.intra_node.nvlink_links * NvlinkPerLinkGBps(sh.compute_capability);
    sh.nvswitch = cluster.intra_node.nvlink_domain;
  }
  sh.pcie_GBps = PcieGBpsOf(cluster.gpu.host_link);
  sh.nvls = cluster.nvls;
  sh.net_latency_us = cluster.net_latency.count() * 1e6;
  sh.tuner = cluster.nccl_tuner;
  sh.collnet = cluster.ib_sharp;
  // NCCL's cpuArch: Arm on Grace superchips (GB200: host copies over NVLink-C2C), x86 elsewhere.
  sh.x86_host = cluster.gpu.host_copy_link != "nvlink-c2c";
  if (sh.nodes > 1) {
    // The first node's GPUs of the group, placed on PCIe switches with the NICs: M/G NICs
    // beside each GPU when M >= G (AWS p5: 4); a NIC per pair of GPUs when M = G/2 (HGX A100
    // with 4 NICs, p4d); otherwise NIC j alone beside GPU j*G/M, the others reaching it over
    // NVLink (PXN): the layouts nccl_model_notes.md 1.4 ran through NCCL's search.
    const int first = *nodes.begin();
    std::vector<int> local;
    for (int r : ranks) {
      if (r / g == first) local.push_back(r % g);
    }
    const int m = cluster.nics_per_node;
    if (m < g) {
      const int block = g / m, beside = block <= 2 ? block : 1;
      sh.switches.assign(static_cast<size_t>(m), {0, 1});
      for (int i : local) {
        if (i % block < beside) ++sh.switches[static_cast<size_t>(i / block)].gpus;
      }
    } else {
      sh.switches.assign(static_cast<size_t>(g), {0, m / g});
      for (int i : local) ++sh.switches[static_cast<size_t>(i)].gpus;
    }
    sh.nic_GBps = cluster.nic_bandwidth.count() / 1e9;
  }
  return sh;
}

}  // namespace shardtune::profiles
