// Strict JSON reading shared by every input file (README.md "Conventions"): required keys via
// Required*, optional keys with their documented default, unknown keys rejected by Finish(). Every
// error is an InputError naming "file:/json/pointer", what was expected and what was found.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardtune::model {

// Reads `path` as JSON. Throws InputError naming the file (and line/column on a syntax error).
nlohmann::json ReadJsonFile(const std::string& path);
// Parses `text`; `name` is used in messages in place of a file name.
nlohmann::json ParseJsonText(const std::string& text, const std::string& name);

// Returns the candidate closest to `word` by edit distance, or "" when none is close enough to
// be a plausible typo (distance > max(2, |word|/3)).
std::string ClosestName(const std::string& word, const std::vector<std::string>& candidates);

// Short human description of a JSON value's type and content, for "got ..." messages.
std::string Describe(const nlohmann::json& v);
// A list of small integers in [0, 100000]: block indexes (a VL tower's fullatt_block_indexes,
// deepstack_visual_indexes) or sizes (M-RoPE's mrope_section), `item` and `items` naming them in
// the one-line InputError; `where` names the key.
std::vector<int> BlockIndexes(const nlohmann::json& v, const std::string& where, const char* item = "a block index",
                              const char* items = "block indexes");
// `key` as one JSON pointer token (RFC 6901: "~" -> "~0", "/" -> "~1"), with control characters
// written as JSON writes them (\u000a) so that a message naming the key stays one line.
std::string EscapePointerToken(const std::string& key);

// Reads one JSON object. Not thread-safe; cheap to construct.
class StrictReader {
 public:
  // REQUIRES: `obj` outlives the reader. `file` prefixes messages; `pointer` is the JSON pointer
  // of `obj` inside the file ("" for the root). Throws InputError if `obj` is not an object.
  StrictReader(const nlohmann::json& obj, std::string file, std::string pointer = "");

  bool Has(const std::string& key) const;
  int64_t RequiredInt(const std::string& key, int64_t min, int64_t max);
  int64_t OptionalInt(const std::string& key, int64_t def, int64_t min, int64_t max);
  double RequiredNumber(const std::string& key, double min, double max);
  double OptionalNumber(const std::string& key, double def, double min, double max);
  bool OptionalBool(const std::string& key, bool def);
  std::string RequiredString(const std::string& key);
  std::string OptionalString(const std::string& key, const std::string& def);
  // A string that must be one of `allowed`; the message lists them.
  std::string RequiredEnum(const std::string& key, const std::vector<std::string>& allowed);
  std::string OptionalEnum(const std::string& key, const std::string& def,
                           const std::vector<std::string>& allowed);
  // The raw value of a key (marked as read); nullopt when absent.
  std::optional<nlohmann::json> OptionalValue(const std::string& key);
  const nlohmann::json& RequiredValue(const std::string& key);
  // A nested object as its own reader (marked as read here).
  StrictReader RequiredObject(const std::string& key);

  // Marks keys as known without reading them (for keys consumed elsewhere).
  void Ignore(const std::string& key);
  // Checks "schema" == kind and "schema_version" is in [1, max_version].
  void CheckSchema(const std::string& kind, int max_version);
  // Throws InputError naming the first unknown key (with a suggestion) if any key was not read.
  void Finish() const;

  // "file:/pointer/key", for messages.
  std::string Where(const std::string& key) const;
  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }

 private:
  [[noreturn]] void Fail(const std::string& key, const std::string& expected,
                         const nlohmann::json& got) const;
  const nlohmann::json& obj_;
  std::string file_;
  std::string pointer_;
  std::set<std::string> read_;
  mutable std::set<std::string> asked_;  // every key looked up, present or not (for hints)
};

}  // namespace shardtune::model
