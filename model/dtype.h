// Element dtypes of parameters, gradients and activations. A vocabulary header: profiles/ may
// include it (tests/layering_test.cc VocabularyHeaders), as the measured kernel tables name the
// dtype each sample ran in.
#pragma once

#include <cstdint>

namespace shardtune::model {

enum class DType { kFp32, kBf16, kFp16 };
int64_t BytesPerElement(DType d);
const char* ToString(DType d);  // "fp32", "bf16", "fp16" (model/plan.cc)

}  // namespace shardtune::model
