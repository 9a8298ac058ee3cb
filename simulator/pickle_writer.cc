// Pickle protocol 2 opcodes as Lib/pickletools.py documents them (and Lib/pickle.py's
// _Pickler writes them): PROTO 0x80, EMPTY_DICT '}', EMPTY_LIST ']', MARK '(', SETITEMS 'u',
// APPENDS 'e', TUPLE 't', BINUNICODE 'X' (4-byte little-endian length, UTF-8), BININT 'J'
// (4-byte signed little-endian), LONG1 0x8a (1-byte length, little-endian two's complement),
// BINFLOAT 'G' (8-byte big-endian IEEE 754), NEWTRUE 0x88, NEWFALSE 0x89, NONE 'N',
// LONG_BINPUT 'r', LONG_BINGET 'j' (4-byte index), STOP '.'.
#include "simulator/pickle_writer.h"

#include <cstring>

namespace shardtune::sim {

PickleWriter::PickleWriter() {
  Op(0x80);
  Op(2);
}

void PickleWriter::Le32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PickleWriter::None() { Op('N'); }
void PickleWriter::Bool(bool v) { Op(v ? 0x88 : 0x89); }

void PickleWriter::Int(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    Op('J');
    Le32(static_cast<uint32_t>(static_cast<int32_t>(v)));
    return;
  }
  // LONG1: the shortest little-endian two's complement that keeps the sign (pickle.encode_long).
  auto u = static_cast<uint64_t>(v);
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  while (bytes.size() > 1) {
    auto last = static_cast<uint8_t>(bytes.back());
    auto prev = static_cast<uint8_t>(bytes[bytes.size() - 2]);
    bool redundant = (last == 0x00 && (prev & 0x80) == 0) || (last == 0xff && (prev & 0x80) != 0);
    if (!redundant) break;
    bytes.pop_back();
  }
  Op(0x8a);
  out_.push_back(static_cast<char>(bytes.size()));
  out_ += bytes;
}

void PickleWriter::Float(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  Op('G');
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void PickleWriter::Str(const std::string& utf8) {
  Op('X');
  Le32(static_cast<uint32_t>(utf8.size()));
  out_ += utf8;
}

void PickleWriter::BeginDict() {
  Op('}');
  Op('(');
}
void PickleWriter::EndDict() { Op('u'); }
void PickleWriter::BeginList() {
  Op(']');
  Op('(');
}
void PickleWriter::EndList() { Op('e'); }
void PickleWriter::BeginTuple() { Op('('); }
void PickleWriter::EndTuple() { Op('t'); }

uint32_t PickleWriter::Memoize() {
  Op('r');
  Le32(next_memo_);
  return next_memo_++;
}

void PickleWriter::Recall(uint32_t index) {
  Op('j');
  Le32(index);
}

std::string PickleWriter::Finish() {
  Op('.');
  return std::move(out_);
}

}  // namespace shardtune::sim
