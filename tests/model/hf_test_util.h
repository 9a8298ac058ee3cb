// Helpers shared by the HF config.json import tests (hf_config_test.cc, architectures_test.cc).
#pragma once

#include <string>

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

}  // namespace shardtune::model::testing_util
