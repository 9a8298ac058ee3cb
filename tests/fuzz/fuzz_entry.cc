// libFuzzer entry point; built once per parser with SHARDTUNE_FUZZ_TARGET naming it
// (tests/fuzz/CMakeLists.txt). A broken contract aborts, so libFuzzer saves the input.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string problem = shardtune::fuzz::RunOne(SHARDTUNE_FUZZ_TARGET, data, size);
  if (!problem.empty()) {
    std::fprintf(stderr, "shardtune fuzz %s: %s\n", SHARDTUNE_FUZZ_TARGET, problem.c_str());
    std::abort();
  }
  return 0;
}
