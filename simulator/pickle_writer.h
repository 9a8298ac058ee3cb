// A writer of Python pickles (protocol 2, pickletools' opcodes), enough for the plain data of
// torch.cuda.memory._snapshot(): dicts, lists, tuples, str, int (any int64), float, bool, None,
// and memoized sub-objects written once and referenced again (the frames many events share).
// Built bottom-up in call order, as a pickle is: Begin/End pairs bracket containers.
#pragma once

#include <cstdint>
#include <string>

namespace shardtune::sim {

class PickleWriter {
 public:
  PickleWriter();  // writes PROTO 2

  void None();
  void Bool(bool v);
  void Int(int64_t v);
  void Float(double v);
  void Str(const std::string& utf8);

  // Containers: Begin*, then the items (a dict: key, value, key, value, ...), then End*.
  void BeginDict();
  void EndDict();
  void BeginList();
  void EndList();
  void BeginTuple();
  void EndTuple();

  // Memo: after writing an object, Memoize() stores it under a new index (returned); Recall(i)
  // writes a reference to that same object (LONG_BINPUT / LONG_BINGET).
  uint32_t Memoize();
  void Recall(uint32_t index);

  // The finished pickle (appends STOP). The writer must not be used afterwards.
  std::string Finish();

 private:
  void Op(uint8_t code) { out_.push_back(static_cast<char>(code)); }
  void Le32(uint32_t v);
  std::string out_;
  uint32_t next_memo_ = 0;
};

}  // namespace shardtune::sim
