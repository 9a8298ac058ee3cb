// One fuzz input through one of shardtune's parsers, shared by the libFuzzer entry points
// (fuzz_entry.cc, clang builds) and the corpus replay test (fuzz_replay_test.cc, every build).
// The contract every parser keeps: it returns, or throws InputError with a one-line message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::fuzz {

// The parsers, by the name of their fuzz target and corpus folder (tests/fuzz/corpus/<name>/):
// model_spec, hf_config, cluster_json, cluster_shorthand, plan_json, profile_json,
// measurements_json, config_import (--from files: planner/configs/import.h), torch_trace (calibrate
// --trace: simulator/torch_trace.h).
const std::vector<std::string>& TargetNames();

// Feeds `data` to target `name`'s parser and then to what every command does next with a parsed
// value (ModelSpec: the parameter count; Plan: Problems() against a few worlds). Returns "" when
// the parser accepted the input or threw an InputError whose message is one non-empty line;
// otherwise a one-line description of the broken contract (another exception type, a multi-line
// or empty message). Crashes, hangs and leaks are left for the sanitizers to report.
// REQUIRES: `name` is one of TargetNames(). Not thread-safe (file-based parsers share a memfd).
std::string RunOne(const std::string& name, const uint8_t* data, size_t size);

}  // namespace shardtune::fuzz
