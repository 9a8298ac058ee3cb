// Memory and time of each phase of a run (issue #11), as the estimate names them
// (simulator/job_phases.cc): model load (model built, sharded, optimizer created), step 0 (the
// first step of this process), the steady steps (the rest), checkpoint save, resume (loading a
// checkpoint). Each phase resets the peaks at its start and reads them at its end: on CPU the
// tracked tensor bytes (memory_tracker.h) and VmHWM; on CUDA the caching allocator's allocated
// and reserved peaks and the device's used memory, plus the host VmHWM. Plain C++ header.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/measurements_json.h"

namespace shardtune::exec {

class Communicator;
class Watchdog;

enum class RunPhase : uint8_t { kLoad, kStep0, kSteady, kSave, kResume };
inline constexpr int kNumRunPhases = 5;
// "model load", "step 0", "steady step", "checkpoint save", "resume" (JobPhase's names).
const char* PhaseName(RunPhase p);

// One rank's figures of one phase, over every time it was entered, as measurements.json records
// them (the file's one definition; BuildMeasurements sets `rank`): count 0: never entered (left
// out of the file); duration_s: summed wall time; rss_peak_bytes: the process's VmHWM so far when
// the kernel refuses the reset; the device_* figures: CUDA only, device_used_bytes the maximum of
// cudaMemGetInfo at the phase's ends.
using PhasePeak = model::MeasuredPhaseRank;

using RankPhases = std::array<PhasePeak, kNumRunPhases>;

class PhaseMeter {
 public:
  // cuda_device < 0: CPU. `watchdog` (may be null, not owned) hears every Begin and End.
  PhaseMeter(int cuda_device, Watchdog* watchdog);
  // Starts phase `p`: resets the peaks (tracked, RSS, CUDA). REQUIRES: no phase open.
  void Begin(RunPhase p);
  // Ends the open phase; keep false drops it (e.g. a resume that found no checkpoint).
  void End(bool keep = true);
  const RankPhases& phases() const { return phases_; }

  // The whole process's peaks so far (phase resets clear the counters, so the meter keeps
  // them): tracked (CUDA: allocated), host VmHWM, and on CUDA the reserved peak.
  struct Peaks {
    int64_t tracked = 0, rss = 0, device_reserved = 0;
  };
  Peaks SoFar() const;

  // Test-only: Begin(p) then sleeps for `seconds` (the watchdog's tests stall a rank).
  void StallAt(RunPhase p, double seconds) {
    stall_phase_ = static_cast<int>(p);
    stall_s_ = seconds;
  }

 private:
  int cuda_device_;
  Watchdog* watchdog_;
  RankPhases phases_{};
  int open_ = -1;
  double start_s_ = 0;
  int64_t start_bytes_ = 0;
  Peaks folded_;  // peaks of the periods before the last reset
  int stall_phase_ = -1;
  double stall_s_ = 0;
};

// Every rank's phases to every rank (collective over `world`), indexed by rank.
std::vector<RankPhases> GatherPhases(Communicator& world, const RankPhases& mine);

}  // namespace shardtune::exec
