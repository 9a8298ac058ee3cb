// Benchmark (not a test): NCCL's model (profiles/nccl_model.h) against published nccl-tests bus
// bandwidths, and its all_gather_perf / reduce_scatter_perf / all_reduce_perf curves for every
// node preset. The predicted busbw is what nccl-tests would print: S x BusBwFactor / time, with
// time = NCCL's latency + S / algBw for the algorithm and protocol it picks.
//
// Usage: nccl_busbw [tests/data/validation/nccl_published_busbw.json]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "profiles/cluster.h"
#include "profiles/cluster_presets.h"
#include "profiles/collective.h"
#include "profiles/nccl_model.h"

namespace st = shardtune;
using st::profiles::Collective;

namespace {

Collective Kind(const std::string& s) {
  if (s == "all_gather") return Collective::kAllGather;
  if (s == "reduce_scatter") return Collective::kReduceScatter;
  return Collective::kAllReduce;
}

std::vector<int> World(const st::profiles::ClusterSpec& c) {
  std::vector<int> r(static_cast<size_t>(c.world_size()));
  for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<int>(i);
  return r;
}

// nccl-tests' busbw for NCCL's estimate of one call.
double PredictedBusbw(const st::profiles::NcclComm& comm, Collective c, int64_t bytes,
                      st::profiles::NcclCollectiveCost* out,
                      st::profiles::NcclReduceOp op = st::profiles::NcclReduceOp::kSum) {
  *out = comm.Cost(c, st::Bytes::Of(bytes), op);
  return static_cast<double>(bytes) * st::profiles::BusBwFactor(c, comm.ranks()) / out->time.count() / 1e9;
}

std::string Size(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%lld GiB", static_cast<long long>(b >> 30));
  else std::snprintf(buf, sizeof buf, "%lld MiB", static_cast<long long>(b >> 20));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "tests/data/validation/nccl_published_busbw.json";
  std::ifstream in(path);
  if (!in) {
    std::cerr << path << ": cannot read (run from the repository root or pass the file)\n";
    return 2;
  }
  const nlohmann::json doc = nlohmann::json::parse(in);
  const std::time_t now = std::time(nullptr);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::printf("NCCL's model (NCCL 2.30.7 search + tuning) vs published nccl-tests busbw, %s\n\n", date);
  std::printf("| id | cluster | collective | size | NCCL's choice | predicted GB/s | published GB/s | error |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<double> big_errors, all_errors, gib_errors, mid_errors;
  int within = 0, big = 0, gib_within = 0, mid_within = 0;
  for (const auto& p : doc.at("points")) {
    auto cluster = st::profiles::ParseClusterShorthand(p.at("cluster").get<std::string>());
    if (p.contains("ib_sharp")) cluster.ib_sharp = p.at("ib_sharp").get<bool>();
    auto shape = st::profiles::NcclShapeOf(cluster, World(cluster));
    if (p.contains("nvls")) shape.nvls = p.at("nvls").get<bool>();
    const st::profiles::NcclComm comm(shape);
    const Collective c = Kind(p.at("collective").get<std::string>());
    const int64_t bytes = p.at("bytes").get<int64_t>();
    st::profiles::NcclCollectiveCost cost;
    double pred = 0;
    if (p.contains("nccl_algo")) {
      // NCCL_ALGO forces the algorithm; NCCL still picks the protocol by least time.
      const std::string want = p.at("nccl_algo").get<std::string>();
      std::optional<st::profiles::NcclCollectiveCost> best;
      for (auto algo : {st::profiles::NcclAlgo::kRing, st::profiles::NcclAlgo::kTree, st::profiles::NcclAlgo::kNvls,
                        st::profiles::NcclAlgo::kNvlsTree, st::profiles::NcclAlgo::kPat,
                        st::profiles::NcclAlgo::kCollNetDirect, st::profiles::NcclAlgo::kCollNetChain}) {
        if (want != st::profiles::ToString(algo)) continue;
        for (auto proto : {st::profiles::NcclProto::kLL, st::profiles::NcclProto::kLL128, st::profiles::NcclProto::kSimple}) {
          auto e = comm.CostOf(c, st::Bytes::Of(bytes), algo, proto);
          if (e && (!best || e->time.count() < best->time.count())) best = e;
        }
      }
      if (!best) {
        std::fprintf(stderr, "%s: NCCL's model does not enable nccl_algo \"%s\" here\n", p.at("id").get<std::string>().c_str(),
                     want.c_str());
        return 2;
      }
      cost = *best;
      pred = static_cast<double>(bytes) * st::profiles::BusBwFactor(c, comm.ranks()) / cost.time.count() / 1e9;
    } else {
      pred = PredictedBusbw(comm, c, bytes, &cost);
    }
    const double pub = p.at("busbw_GBps").get<double>();
    const double err = pred / pub - 1;
    all_errors.push_back(std::fabs(err));
    if (bytes >= (int64_t{64} << 20)) {
      ++big;
      big_errors.push_back(std::fabs(err));
      if (std::fabs(err) <= 0.15) ++within;
      auto& bucket = bytes >= (int64_t{1} << 30) ? gib_errors : mid_errors;
      bucket.push_back(std::fabs(err));
      if (std::fabs(err) <= 0.15) ++(bytes >= (int64_t{1} << 30) ? gib_within : mid_within);
    }
    std::printf("| %s | %s | %s | %s | %s/%s x%d | %.1f | %.1f | %+.1f%% |%s\n", p.at("id").get<std::string>().c_str(),
                p.at("cluster").get<std::string>().c_str(), p.at("collective").get<std::string>().c_str(),
                Size(bytes).c_str(), st::profiles::ToString(cost.algo), st::profiles::ToString(cost.proto),
                cost.channels, pred, pub, 100 * err,
                p.contains("note") ? (" " + p.at("note").get<std::string>()).c_str() : "");
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::printf("\n%d of %d published points at >= 64 MiB within 15%%; median |error| %.1f%% (>= 64 MiB), %.1f%% (all)\n",
              within, big, 100 * median(big_errors), 100 * median(all_errors));
  std::printf("  >= 1 GiB: %d of %zu within 15%%, median |error| %.1f%%; 64-512 MiB: %d of %zu, median |error| %.1f%%\n",
              gib_within, gib_errors.size(), 100 * median(gib_errors), mid_within, mid_errors.size(),
              100 * median(mid_errors));

  // The curves nccl-tests would print for each preset (1 MiB to 8 GiB), at 1, 2 and 8 nodes.
  std::printf("\nPredicted busbw (GB/s) by preset, nodes, collective and size\n");
  const std::vector<int64_t> sizes = {int64_t{1} << 20, int64_t{8} << 20, int64_t{64} << 20, int64_t{512} << 20,
                                      int64_t{8} << 30};
  std::printf("%-34s %-15s", "cluster", "collective");
  for (int64_t s : sizes) std::printf(" %14s", Size(s).c_str());
  std::printf("\n");
  for (const auto& preset : st::profiles::ClusterPresets()) {
    for (int nodes : {1, 2, 8}) {
      const std::string name = std::to_string(nodes) + "x" + preset.name;
      const auto cluster = st::profiles::ParseClusterShorthand(name);
      const st::profiles::NcclComm comm(st::profiles::NcclShapeOf(cluster, World(cluster)));
      for (Collective c : {Collective::kAllGather, Collective::kReduceScatter, Collective::kAllReduce}) {
        std::printf("%-34s %-15s", name.c_str(), st::profiles::ToString(c));
        for (int64_t s : sizes) {
          st::profiles::NcclCollectiveCost cost;
          const double bw = PredictedBusbw(comm, c, s, &cost);
          char cell[32];
          std::snprintf(cell, sizeof cell, "%.0f %s", bw, st::profiles::ToString(cost.algo));
          std::printf(" %14s", cell);
        }
        std::printf("\n");
      }
    }
  }

  // InfiniBand SHARP (a cluster file's "ib_sharp": CollNet through the SHARP plugin with
  // NCCL_COLLNET_ENABLE=1) on DGX H100 nodes: a sum as nccl-tests runs it, and the scaled sum
  // FSDP2's reduce-scatters and HSDP all-reduces run (ReduceOp.AVG on bf16/fp32: no NVLS).
  // No published point with SHARP is in the file: these are NCCL's estimates only.
  std::printf("\nWith InfiniBand SHARP (CollNet), dgx-h100: busbw (GB/s) and NCCL's choice\n");
  std::printf("%-34s %-15s", "cluster", "collective");
  for (int64_t s : sizes) std::printf(" %20s", Size(s).c_str());
  std::printf("\n");
  for (int nodes : {2, 4, 16}) {
    for (bool sharp : {false, true}) {
      auto cluster = st::profiles::ParseClusterShorthand(std::to_string(nodes) + "xdgx-h100");
      cluster.ib_sharp = sharp;
      const std::string name = cluster.name + (sharp ? " + SHARP" : "");
      const st::profiles::NcclComm comm(st::profiles::NcclShapeOf(cluster, World(cluster)));
      for (auto [c, op, label] : {std::tuple{Collective::kAllGather, st::profiles::NcclReduceOp::kSum, "all_gather"},
                                  std::tuple{Collective::kReduceScatter, st::profiles::NcclReduceOp::kScaled, "reduce_scatter avg"},
                                  std::tuple{Collective::kAllReduce, st::profiles::NcclReduceOp::kSum, "all_reduce sum"},
                                  std::tuple{Collective::kAllReduce, st::profiles::NcclReduceOp::kScaled, "all_reduce avg"}}) {
        std::printf("%-34s %-15s", name.c_str(), label);
        for (int64_t s : sizes) {
          st::profiles::NcclCollectiveCost cost;
          const double bw = PredictedBusbw(comm, c, s, &cost, op);
          char cell[40];
          std::snprintf(cell, sizeof cell, "%.0f %s", bw, st::profiles::ToString(cost.algo));
          std::printf(" %20s", cell);
        }
        std::printf("\n");
      }
    }
  }
  return 0;
}
