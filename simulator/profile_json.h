// The calibrated profile (`--profile FILE`, "schema": "shardtune.profile"): values that replace
// the simulator's named guesses. "memory" overrides MemoryConstants, "compute" and "network" the
// cost model's efficiencies, "collectives" fitted latency + bandwidth per link family and group
// size. Version 2 (written by `shardtune calibrate`) adds "provenance" (where the measurements
// were taken) and "fit" (each fitted term's residual). Version 3 (written by `shardtune probe`)
// adds "kernels" (profiles::KernelTables: measured GEMM, attention, memory-bound kernel, host,
// copy and collective timings), the host costs in "compute" (host_per_kernel_s,
// host_per_fsdp_hook_s) and the provenance's driver, CUDA and NCCL versions, date and command;
// versions 1 and 2 are still read.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profiles/cluster.h"
#include "profiles/hardware.h"
#include "simulator/cost_model.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {

inline constexpr int kProfileSchemaVersion = 3;

// The machine and software the profile's measurements came from (empty fields: unknown).
struct ProfileProvenance {
  std::string hostname, cpu_model, device, backend, torch_version, shardtune_version;
  std::string driver_version, cuda_version, nccl_version;
  std::string date;     // ISO 8601 day the measurements were taken
  std::string command;  // the command line that took them
  std::vector<std::string> measurements;  // the files it was fitted on
};

// How well one fitted term explains its measurements: relative residuals (fit - measured) /
// measured over its rows.
struct FitSummary {
  std::string term;  // "compute", "collectives loopback x2", "memory overheads", ...
  int rows = 0;
  double rms_relative_residual = 0;
  double max_relative_residual = 0;
  std::string note;  // what was fitted, what could not be identified
};

struct Profile {
  std::string name;    // free text, e.g. "H100 SXM, torch 2.11, NCCL 2.28, 2026-11-13"
  MemoryConstants memory;
  CostConstants costs;  // "compute", "network" and "collectives" sections
  bool has_provenance = false;
  ProfileProvenance provenance;
  std::vector<FitSummary> fits;
};

// Reads and validates a profile; keys absent from "memory", "compute" ({matmul_efficiency,
// attention_efficiency, memory_efficiency, op_overhead_s, host_memory_bytes_per_s_per_node}) and
// "network" ({nvlink_efficiency, pcie_efficiency, network_efficiency}) keep their defaults.
// Efficiencies are in (0, 16]: above 1 only where the device's peak is an assumption (cpu:N).
// Throws InputError naming the file and JSON pointer.
Profile ReadProfileFile(const std::string& path);
// The profile the catalog ships for a GPU kind (GpuSpec::measured_profile: `shardtune probe` on
// that kind, embedded from profiles/measured/), parsed once; nullptr when the kind has none.
const Profile* CatalogProfile(const profiles::GpuSpec& gpu);
// The constants a job runs on: the profile file when one is given (--profile, taken whole), else
// the catalog's measured profile for the cluster's GPU, else the defaults.
Profile JobProfile(const std::string& file, const profiles::GpuSpec& gpu);

// "" when `p` may time jobs on `cluster`; else why not, one line: a profile probed on CPU ranks
// for a GPU cluster, a GPU profile for cpu:N, or one whose device maps to another catalog kind
// (provenance.device through profiles/device_names.h; a device no catalog entry matches, or a
// profile without provenance, passes). Its kernel tables and efficiencies would time the
// cluster's steps with another device's speed (issue #49: a CPU probe made an 8xH100 step 49 s).
std::string ProfileDeviceMismatch(const Profile& p, const profiles::ClusterSpec& cluster);
// The same from parsed JSON; `name` stands for the file in messages.
Profile ProfileFromJson(const nlohmann::json& j, const std::string& name);
// Every section, schema_version kProfileSchemaVersion; ProfileFromJson(ProfileToJson(p))
// reproduces p.
nlohmann::ordered_json ProfileToJson(const Profile& p);

}  // namespace shardtune::sim
