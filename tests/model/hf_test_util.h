// Helpers shared by the HF config.json import tests (hf_config_test.cc, architectures_test.cc,
// vision_test.cc, deepseek_test.cc).
#pragma once

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/activations.h"
#include "model/errors.h"
#include "model/hf_config.h"
#include "model/model_spec.h"
#include "model/model_spec_json.h"
#include "model/strict_json.h"

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

// A published config.json with one change, and the InputError ImportHfConfig throws for it: the
// bad-config tests list these.
struct BadConfig {
  std::string file;                   // under tests/data/model/
  void (*change)(nlohmann::json& j);  // the one change
  std::string source;                 // the name ImportHfConfig reads it as
  std::string says;                   // a substring of the message
};

// Each of `cases` fails to import, with its message.
inline void ExpectEachImportFails(const std::vector<BadConfig>& cases) {
  for (const BadConfig& c : cases) {
    SCOPED_TRACE(c.file + ": " + c.says);
    nlohmann::json j = ReadJsonFile(Data(c.file));
    c.change(j);
    EXPECT_THAT([&] { ImportHfConfig(j, c.source, nullptr); },
                ::testing::ThrowsMessage<InputError>(::testing::HasSubstr(c.says)));
  }
}

}  // namespace shardtune::model::testing_util
