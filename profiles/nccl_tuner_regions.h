// aws-ofi-nccl's region tuner: the (algorithm, protocol) the EFA net plugin's NCCL tuner picks on
// the EC2 platforms it knows, ported from aws/aws-ofi-nccl src/tuner/nccl_ofi_regions.cpp (commit
// 2daf7d3, 2026-08-21). NCCL loads a tuner from the net plugin's library when NCCL_TUNER_PLUGIN
// names none (NVIDIA/nccl src/plugin/tuner.cc:58-66, ncclGetNetPluginLib(ncclPluginTypeTuner)),
// so on p5/p5e/p5en/p6-b200 with aws-ofi-nccl it is on by default; OFI_NCCL_TUNER_TYPE=Internal or
// OFI_NCCL_FORCE_NUM_RAILS turn it off (include/tuner/nccl_ofi_tuner_process_config.h).
//
// How the plugin decides (region_get_coll_info_internal_v3): each collective has an ordered list
// of polygons in the plane (log2 bytes, log2 ranks), bytes being NCCL's nBytes (the gathered size
// of an all-gather, the input of a reduce-scatter: enqueue.cc ncclFuncMaxSendRecvCount). The first
// polygon, in list order, whose (algorithm, protocol) NCCL has enabled and which holds the point
// (its edges included) has its cost set to 0, so NCCL runs it. No polygon: NCCL's own choice. On
// two nodes or fewer the plugin always leaves the choice to NCCL ("the regions are not well
// defined"), and it only has regions for the rank layouts listed in the tables (p5: 8, 2 or 1 GPU
// per node; p5en and p6-b200: 8 or 1). Its channel-count overrides (p6 tree LL128 at 4-32 MiB, PAT)
// change the runtime, not NCCL's estimate, and are left out.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "profiles/cluster.h"
#include "profiles/collective.h"

namespace shardtune::profiles {

// The algorithms the plugin's regions name. PAT: NCCL's Parallel Aggregated Trees (one GPU per
// node, all-gather and reduce-scatter).
enum class TunerAlgo { kRing, kTree, kNvls, kNvlsTree, kPat };
enum class TunerProto { kLL, kLL128, kSimple };

struct TunerRegionChoice {
  TunerAlgo algo = TunerAlgo::kRing;
  TunerProto proto = TunerProto::kSimple;
};

// The plugin's regions for one communicator of `ranks` GPUs over `nodes` nodes (built once, as
// region_init_internal does at communicator init).
class AwsOfiRegionTuner {
 public:
  AwsOfiRegionTuner(NcclTuner tuner, int ranks, int nodes);
  // The plugin's choice for `c` (all-gather, reduce-scatter or all-reduce) of `bytes`, or nullopt
  // where it leaves the choice to NCCL. `enabled(algo, proto)` says whether NCCL's cost table has
  // that entry (not NCCL_ALGO_PROTO_IGNORE); the plugin skips the regions of disabled entries.
  std::optional<TunerRegionChoice> Choose(Collective c, int64_t bytes,
                                          const std::function<bool(TunerAlgo, TunerProto)>& enabled) const;
  // Whether the plugin has any region for this communicator (more than two nodes and a rank
  // layout its tables cover).
  bool active() const;

  struct Point {
    double x = 0, y = 0;
  };
  struct Region {
    TunerAlgo algo;
    TunerProto proto;
    std::vector<Point> vertices;  // log2 (bytes, ranks) once built
  };

 private:
  int ranks_ = 0, nodes_ = 0;
  std::vector<Region> regions_[3];  // all-gather, reduce-scatter, all-reduce
};

}  // namespace shardtune::profiles
