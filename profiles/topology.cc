// The cluster as a directed Boost.Graph: per node the GPUs, an NVSwitch (NVLink parts), a host
// bridge (PCIe), NICs, and one fabric switch joining all NICs (a non-blocking fat tree is
// assumed). Each physical link is two directed edges, one per direction, with the per-direction
// bandwidth as capacity. Routes are lowest-latency paths (Dijkstra), found lazily and cached.
#include "profiles/topology.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <unordered_map>
#include <utility>

#include "model/errors.h"

namespace shardtune::profiles {
namespace {

enum class VertexKind { kGpu, kNvSwitch, kHostBridge, kNicOut, kNicIn, kFabricSwitch };

struct VertexProps {
  VertexKind kind = VertexKind::kGpu;
  int node = 0;
};

struct EdgeProps {
  int id = 0;           // index into Impl::capacity / latency
  bool nvlink = false;  // the edge belongs to an NVLink domain
};

using Graph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, VertexProps, EdgeProps>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;

// Added to every edge's routing cost so that, of two routes with equal latency, the one with
// fewer hops wins. Far below any link latency, so it never overrides one.
constexpr double kHopCostS = 1e-12;

}  // namespace

struct Topology::Impl {
  ClusterSpec cluster;
  Graph graph;
  std::vector<Vertex> gpu;       // by rank
  std::vector<double> capacity;  // by edge id, bytes/s per direction
  std::vector<double> latency;   // by edge id, seconds
  // Fabric switch -> NIC (inbound side) edges by destination node, as (NIC vertex, edge id).
  std::vector<std::vector<std::pair<Vertex, int>>> fabric_to_node;
  mutable std::mutex mu;                                          // guards paths
  mutable std::map<std::pair<int, int>, std::vector<int>> paths;  // (rank a, rank b) -> edge ids

  Vertex AddVertex(VertexKind kind, int node) { return boost::add_vertex({kind, node}, graph); }
  void AddEdge(Vertex from, Vertex to, BytesPerSecond bw, Seconds lat, bool nvlink) {
    boost::add_edge(from, to, EdgeProps{static_cast<int>(capacity.size()), nvlink}, graph);
    capacity.push_back(bw.count());
    latency.push_back(lat.count());
  }
  // Both directions of a physical link, each with the link's per-direction bandwidth.
  void AddLink(Vertex a, Vertex b, BytesPerSecond bw, Seconds lat, bool nvlink) {
    AddEdge(a, b, bw, lat, nvlink);
    AddEdge(b, a, bw, lat, nvlink);
  }
  void BuildNode(int node, const LinkSpec& pcie, Vertex fabric);
  std::vector<int> ShortestPath(Vertex src, Vertex dst) const;
  const std::vector<int>& Path(int a, int b) const;
  void CheckRank(int rank) const {
    SHARDTUNE_CHECK(rank >= 0 && rank < cluster.world_size())
        << "rank " << rank << " outside [0, " << cluster.world_size() << ")";
  }
};

// One node. Latency bookkeeping: a GPU-to-GPU hop through a switch or bridge crosses two edges,
// each carrying half the link class's latency, so the hop costs one NCCL hwLat. GPU-NIC edges
// carry none: NCCL's NET latency already covers the whole GPU-NIC-fabric-NIC-GPU hop.
void Topology::Impl::BuildNode(int node, const LinkSpec& pcie, Vertex fabric) {
  const int g = cluster.gpus_per_node;
  const LinkSpec& intra = cluster.intra_node;
  std::vector<Vertex> local;
  for (int i = 0; i < g; ++i) local.push_back(AddVertex(VertexKind::kGpu, node));
  gpu.insert(gpu.end(), local.begin(), local.end());
  if (intra.nvlink_domain) {
    Vertex nvswitch = AddVertex(VertexKind::kNvSwitch, node);
    for (Vertex v : local) {
      AddLink(v, nvswitch, intra.bandwidth_per_direction, intra.latency * 0.5, true);
    }
  }
  // Every GPU hangs off the host bridge by its PCIe link (for PCIe-only parts this is also the
  // GPU-to-GPU route). Switch uplinks are not modelled: the bridge is never a bottleneck.
  Vertex bridge = AddVertex(VertexKind::kHostBridge, node);
  for (Vertex v : local) {
    AddLink(v, bridge, pcie.bandwidth_per_direction, pcie.latency * 0.5, false);
  }
  if (cluster.num_nodes <= 1 || cluster.nics_per_node <= 0) return;
  // NIC j serves the block of g / m consecutive GPUs j*g/m .. (j+1)*g/m - 1 (m = nics_per_node):
  // one per GPU on DGX-style nodes, all GPUs for "/node". A NIC is two vertices, one per
  // direction, so no route can use it to hop between two GPUs of the same node. (The graph's
  // lowest-latency routes use the first NIC of a GPU; NCCL's channels over all of them are
  // profiles/nccl_model.h's.)
  // More NICs than GPUs (AWS p5: 4 per GPU): NIC j beside GPU j / (m / g) alone.
  const int m = cluster.nics_per_node;
  const int per_nic = m <= g ? g / m : 1;
  const Seconds half_net = cluster.inter_node.latency * 0.5;
  for (int j = 0; j < m; ++j) {
    Vertex out = AddVertex(VertexKind::kNicOut, node);
    Vertex in = AddVertex(VertexKind::kNicIn, node);
    AddEdge(out, fabric, cluster.nic_bandwidth, half_net, false);
    fabric_to_node[static_cast<size_t>(node)].push_back({in, static_cast<int>(capacity.size())});
    AddEdge(fabric, in, cluster.nic_bandwidth, half_net, false);
    const int first = m <= g ? j * per_nic : j / (m / g);
    for (int i = first; i < first + per_nic; ++i) {
      AddEdge(local[static_cast<size_t>(i)], out, pcie.bandwidth_per_direction, Seconds(), false);
      AddEdge(in, local[static_cast<size_t>(i)], pcie.bandwidth_per_direction, Seconds(), false);
    }
  }
}

// Dijkstra on latency (plus kHopCostS per edge) with sparse state. A route between two nodes
// never passes through a third (that would add a fabric hop), so only vertices of the two end
// nodes and the fabric switch are searched, and the switch is left only towards the
// destination node: O(node size) per query, whatever the cluster size.
std::vector<int> Topology::Impl::ShortestPath(Vertex src, Vertex dst) const {
  const int src_node = graph[src].node, dst_node = graph[dst].node;
  std::unordered_map<Vertex, double> dist{{src, 0.0}};
  std::unordered_map<Vertex, std::pair<Vertex, int>> via;  // vertex -> (previous, edge id)
  using Item = std::pair<double, Vertex>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  queue.push({0.0, src});
  auto relax = [&](double d, Vertex u, Vertex v, int id) {
    const double nd = d + latency[static_cast<size_t>(id)] + kHopCostS;
    auto it = dist.find(v);
    if (it != dist.end() && it->second <= nd) return;
    dist[v] = nd;
    via[v] = {u, id};
    queue.push({nd, v});
  };
  while (!queue.empty()) {
    const auto [d, u] = queue.top();
    queue.pop();
    if (d > dist[u]) continue;
    if (u == dst) break;
    if (graph[u].kind == VertexKind::kFabricSwitch) {
      for (const auto& [v, id] : fabric_to_node[static_cast<size_t>(dst_node)]) relax(d, u, v, id);
      continue;
    }
    for (auto [it, end] = boost::out_edges(u, graph); it != end; ++it) {
      const Vertex v = boost::target(*it, graph);
      const int v_node = graph[v].node;
      if (v_node >= 0 && v_node != src_node && v_node != dst_node) continue;
      relax(d, u, v, graph[*it].id);
    }
  }
  SHARDTUNE_CHECK(src == dst || via.count(dst)) << "no route in the topology graph";
  std::vector<int> path;
  for (Vertex v = dst; v != src; v = via[v].first) path.push_back(via[v].second);
  std::reverse(path.begin(), path.end());
  return path;
}

const std::vector<int>& Topology::Impl::Path(int a, int b) const {
  std::lock_guard<std::mutex> lock(mu);
  auto it = paths.find({a, b});
  if (it == paths.end()) {
    it = paths
             .emplace(std::make_pair(a, b),
                      ShortestPath(gpu[static_cast<size_t>(a)], gpu[static_cast<size_t>(b)]))
             .first;
  }
  return it->second;  // map nodes are stable: safe to use after the lock is released
}

Topology::Topology(const ClusterSpec& cluster) : impl_(std::make_unique<Impl>()) {
  ThrowIfProblems(cluster.Problems("cluster " + cluster.name + ":"));
  impl_->cluster = cluster;
  // The GPU's own PCIe link: the host link of NVLink parts, the intra-node link of PCIe parts.
  const LinkSpec pcie = cluster.intra_node.nvlink_domain
                            ? FindLink(cluster.gpu.host_link, "cluster " + cluster.name + ": gpu")
                            : cluster.intra_node;
  Vertex fabric = impl_->AddVertex(VertexKind::kFabricSwitch, -1);
  impl_->fabric_to_node.resize(static_cast<size_t>(cluster.num_nodes));
  for (int node = 0; node < cluster.num_nodes; ++node) impl_->BuildNode(node, pcie, fabric);
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

int Topology::world_size() const { return impl_->cluster.world_size(); }

int Topology::NodeOf(int rank) const {
  impl_->CheckRank(rank);
  return rank / impl_->cluster.gpus_per_node;
}

int Topology::NodesSpanned(const std::vector<int>& ranks) const {
  std::set<int> nodes;
  for (int r : ranks) nodes.insert(NodeOf(r));
  return static_cast<int>(nodes.size());
}

bool Topology::InOneNvlinkDomain(const std::vector<int>& ranks) const {
  for (int r : ranks) impl_->CheckRank(r);
  if (ranks.size() <= 1) return true;
  // Flood from the first rank over NVLink edges only.
  const Graph& g = impl_->graph;
  std::vector<bool> seen(boost::num_vertices(g), false);
  std::vector<Vertex> stack{impl_->gpu[static_cast<size_t>(ranks[0])]};
  seen[stack.back()] = true;
  while (!stack.empty()) {
    Vertex u = stack.back();
    stack.pop_back();
    for (auto [it, end] = boost::out_edges(u, g); it != end; ++it) {
      Vertex v = boost::target(*it, g);
      if (g[*it].nvlink && !seen[v]) {
        seen[v] = true;
        stack.push_back(v);
      }
    }
  }
  return std::all_of(ranks.begin(), ranks.end(),
                     [&](int r) { return seen[impl_->gpu[static_cast<size_t>(r)]]; });
}

BytesPerSecond Topology::RingBottleneck(const std::vector<int>& ranks) const {
  return ConcurrentRingBottleneck({ranks});
}

BytesPerSecond Topology::ConcurrentRingBottleneck(
    const std::vector<std::vector<int>>& rings) const {
  SHARDTUNE_CHECK(!rings.empty()) << "no ring";
  std::map<int, int> users;  // edge id -> ring hops crossing it, over all rings
  for (const auto& ranks : rings) {
    SHARDTUNE_CHECK(ranks.size() >= 2) << "a ring needs at least 2 ranks, got " << ranks.size();
    for (int r : ranks) impl_->CheckRank(r);
    std::set<int> distinct(ranks.begin(), ranks.end());
    SHARDTUNE_CHECK(distinct.size() == ranks.size()) << "a ring visits each rank once";
    for (size_t i = 0; i < ranks.size(); ++i) {
      for (int e : impl_->Path(ranks[i], ranks[(i + 1) % ranks.size()])) ++users[e];
    }
  }
  double bottleneck = std::numeric_limits<double>::infinity();
  for (const auto& [edge, count] : users) {
    bottleneck = std::min(bottleneck, impl_->capacity[static_cast<size_t>(edge)] / count);
  }
  return BytesPerSecond::Of(bottleneck);
}

Seconds Topology::PathLatency(int a, int b) const {
  impl_->CheckRank(a);
  impl_->CheckRank(b);
  double sum = 0;
  for (int e : impl_->Path(a, b)) sum += impl_->latency[static_cast<size_t>(e)];
  return Seconds::Of(sum);
}

std::vector<int> Topology::ShardGroup(int group_size, int index) const {
  const int world = world_size();
  if (group_size < 1 || world % group_size != 0) {
    throw InputError("shard group size " + std::to_string(group_size) +
                     ": expected a divisor of the world size " + std::to_string(world));
  }
  SHARDTUNE_CHECK(index >= 0 && index < world / group_size) << "shard group index " << index;
  std::vector<int> out;
  for (int k = 0; k < group_size; ++k) out.push_back(index * group_size + k);
  return out;
}

std::vector<int> Topology::ReplicaGroup(int group_size, int index) const {
  const int world = world_size();
  if (group_size < 1 || world % group_size != 0) {
    throw InputError("shard group size " + std::to_string(group_size) +
                     ": expected a divisor of the world size " + std::to_string(world));
  }
  SHARDTUNE_CHECK(index >= 0 && index < group_size) << "replica group index " << index;
  std::vector<int> out;
  for (int k = 0; k < world / group_size; ++k) out.push_back(index + k * group_size);
  return out;
}

}  // namespace shardtune::profiles
