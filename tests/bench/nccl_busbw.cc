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
                      st::profiles::NcclCollectiveCost* out) {
  *out = comm.Cost(c, st::Bytes::Of(bytes));
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
    const auto cluster = st::profiles::ParseClusterShorthand(p.at("cluster").get<std::string>());
    auto shape = st::profiles::NcclShapeOf(cluster, World(cluster));
    if (p.contains("nvls")) shape.nvls = p.at("nvls").get<bool>();
    const st::profiles::NcclComm comm(shape);
    const Collective c = Kind(p.at("collective").get<std::string>());
    const int64_t bytes = p.at("bytes").get<int64_t>();
    st::profiles::NcclCollectiveCost cost;
    const double pred = PredictedBusbw(comm, c, bytes, &cost);
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
  return 0;
}
