// Helpers shared by the HF config.json import tests (hf_config_test.cc, architectures_test.cc).
#pragma once

#include <string>

#include "model/activations.h"
#include "model/model_spec.h"
#include "model/model_spec_json.h"

namespace shardtune::model::testing_util {

// A file under tests/data/model/.
inline std::string Data(const std::string& name) {
  return std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/" + name;
}

// The shape keys of a spec, without name and source: equal for specs of the same model.
inline std::string Shape(ModelSpec s) {
  s.name.clear();
  s.source.clear();
  return ModelSpecToJson(s).dump();
}

// The activation options of the architecture tests' hand counts: bf16, SDPA, HF modeling, at
// 4096 tokens.
inline ActivationOptions Bf16Sdpa() {
  ActivationOptions o;
  o.seq_len = 4096;
  return o;
}

}  // namespace shardtune::model::testing_util
