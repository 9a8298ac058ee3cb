// The cluster spec: nodes x GPUs of one kind, the links inside and between nodes, host memory.
// Built from a JSON file or a shorthand such as "8xH100", "2x8xA100-80G", "16x8xH100-ib400",
// "12x8xH100-roce800/node" or "cpu:4" (README.md, --cluster).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "model/units.h"
#include "profiles/hardware.h"

namespace shardtune::profiles {

// The NCCL tuner plugin the cluster's net plugin brings, which overrides NCCL's own choice of
// algorithm and protocol (profiles/nccl_tuner_regions.h): aws-ofi-nccl's region tuner for p5/p5e
// and for p5en. NCCL loads it from the net plugin's library unless NCCL_TUNER_PLUGIN names another.
enum class NcclTuner { kNone, kAwsOfiP5, kAwsOfiP5en, kAwsOfiP6 };
// "none", "aws-ofi-nccl:p5", "aws-ofi-nccl:p5en", "aws-ofi-nccl:p6" (p6-b200): a cluster file's
// "nccl_tuner".
const char* ToString(NcclTuner t);
// The tuner named `text` (ToString's spellings). Throws InputError "where: expected \"none\", ...
// or \"aws-ofi-nccl:p6\", got \"text\"".
NcclTuner ParseNcclTuner(const std::string& text, const std::string& where);

struct ClusterSpec {
  std::string name;  // the shorthand or file it came from
  int num_nodes = 1;
  int gpus_per_node = 1;
  bool cpu_only = false;  // "cpu:N": N CPU ranks on this host (executor runs)
  GpuSpec gpu;
  LinkSpec intra_node;           // between GPUs of one node
  LinkSpec inter_node;           // the fabric between nodes
  int nics_per_node = 0;         // inter-node NICs per node (0 on one node)
  BytesPerSecond nic_bandwidth;  // per NIC, per direction
  Bytes host_memory_per_node;    // host RAM per node (all its hosts together)
  int cpu_cores_per_node = 0;    // physical CPU cores per node (host Adam, data loading)
  // GPUs per host (operating-system instance) when a node's NVLink domain spans several hosts:
  // a GB200 NVL72 rack is one node of 72 GPUs for NCCL (multi-node NVLink fuses the clique's
  // topology into one "node": NVIDIA/nccl src/graph/topo.cc:1887, init.cc:1072) and for
  // sharding, but 18 hosts (compute trays) of 4 GPUs with their own RAM for loading and
  // checkpoints. 0: the node is one host. A cluster file's "gpus_per_host".
  int gpus_per_host = 0;
  // NVLink SHARP (NVLS) usable by NCCL where the GPUs have it (Hopper on, NVSwitch): its
  // default NCCL_NVLS_ENABLE=2. false: a cluster file's "nvls": false (NCCL_NVLS_ENABLE=0, or no
  // multicast support in the driver/fabric manager); NCCL then runs rings and trees in a node.
  bool nvls = true;
  // The latency the NCCL net plugin reports for its devices (ncclNetProperties_t.latency), which
  // NCCL's tuner adds to every inter-node step, twice for the Simple protocol (NVIDIA/nccl
  // src/graph/search.cc:745 graph->latencyInter, src/graph/tuning.cc:389-391). 0 for NCCL's own
  // InfiniBand/RoCE and socket transports ("Not set", transport/net_ib.cc) and for GPUDirect-TCPX
  // (nccl-plugin-gpudirecttcpx net_tcpx.cc); aws-ofi-nccl sets it per EC2 platform
  // (src/platform-aws.cpp platform_data_map: p4d, p4de, p5, p5e 75 us; p5en, p6 35 us; 75 us
  // elsewhere). A cluster file's "net_latency_us".
  Seconds net_latency;
  // The tuner plugin NCCL loads (NcclTuner): presets p5 and p5en set aws-ofi-nccl's; a cluster
  // file's "nccl_tuner".
  NcclTuner nccl_tuner = NcclTuner::kNone;
  // InfiniBand SHARP usable by NCCL as CollNet: SHARP-capable switches (Quantum and later) with
  // the aggregation manager running, the SHARP net plugin (Mellanox/nccl-rdma-sharp-plugins,
  // shipped in HPC-X and NVIDIA's containers) loaded, and NCCL_COLLNET_ENABLE=1, which is off by
  // default (NVIDIA/nccl src/init.cc:2146-2158). NCCL then adds CollNetDirect, CollNetChain and
  // NVLS across nodes (profiles/nccl_model.h). InfiniBand only. A cluster file's "ib_sharp".
  bool ib_sharp = false;
  std::string machine;           // cpu:N: whose figures these are ("this machine: 23.4 GiB RAM
                                 // (MemTotal), 2 cores"); "" otherwise

  int world_size() const { return num_nodes * gpus_per_node; }
  int GpusPerHost() const { return gpus_per_host > 0 ? gpus_per_host : gpus_per_node; }
  int HostsPerNode() const { return gpus_per_node / std::max(GpusPerHost(), 1); }
  // One host's share of the node's RAM (the node's own figure when it is one host).
  Bytes HostMemoryPerHost() const { return host_memory_per_node / std::max(HostsPerNode(), 1); }
  // Every problem (empty when valid), each "<where>/<json key>: expected ..., got ...", e.g.
  // Problems("cluster.json:") -> {"cluster.json:/nodes: expected integer >= 1, got 0"}.
  std::vector<std::string> Problems(const std::string& where) const;
};

// Parses a shorthand; throws InputError naming "--cluster" and the grammar on failure, e.g.
//   --cluster: expected [NODESx]GPUSxKIND[-FABRIC<Gbps>[/node]] or [NODESx]PRESET (e.g. 8xH100, ...),
//   got "8xH1OO"; unknown GPU kind "H1OO" (did you mean "H100"?)
// Grammar: NODES defaults to 1; the separator is x or X; KIND is a catalog name or alias
// (case-insensitive). Kinds contain dashes ("A100-80G"), so the last dash-separated token is a
// fabric only when it reads (ib|roce|eth)<digits>[/node]. FABRIC<Gbps> gives one NIC of that
// rate per GPU, "/node" one per node; "ib" needs a catalog InfiniBand rate (100, 200, 400,
// 800), "roce" and "eth" take any rate. Without FABRIC: the kind's default_fabric, with one NIC
// per GPU when the GPUs share an NVLink domain (SXM parts, DGX/HGX style) and one per node
// otherwise. One node has no NICs (nics_per_node = 0). Host memory and cores come from the
// kind's reference machine (e.g. DGX H100: 2 TiB, 112 cores for 8 GPUs), scaled by GPU count.
// [NODESx]PRESET: NODES nodes of a named node type (profiles/cluster_presets.h: dgx-h100, p5,
// nd-h100-v5, a3-mega, ...), which fixes GPUs, NICs and host per node.
// "cpu:N": N CPU ranks on this machine, cpu_only: its RAM (MemTotal, or its cgroup's limit) and
// cores (profiles/this_machine.h) shared by the ranks; gpu = a "CPU" pseudo-GPU (the rank's
// share of the cores and a 1/N share of the RAM), links "loopback".
ClusterSpec ParseClusterShorthand(const std::string& text);
// Reads a cluster JSON file ("schema": "shardtune.cluster", keys and defaults listed at the top
// of cluster_json.cc); strict: unknown keys are errors naming file and JSON pointer; every
// problem found by Problems() is reported together in one InputError.
ClusterSpec ReadClusterFile(const std::string& path);
// A shorthand when `arg` is not an existing file, else the file (a name ending in ".json" is
// always read as a file, so a missing one is reported as such).
ClusterSpec LoadCluster(const std::string& arg);

}  // namespace shardtune::profiles
