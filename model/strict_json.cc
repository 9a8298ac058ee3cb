// Strict JSON reading: messages of the form "file:/pointer/key: expected X, got Y".
#include "model/strict_json.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "model/errors.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}


// A string value as JSON writes it: quoted, control characters escaped, so that messages stay
// one line (tests/fuzz/regressions).
std::string Quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string EscapePointerToken(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  // Messages are one line: a key "a\nb" is shown as JSON writes it (found by tests/fuzz).
  return EscapeControls(out);
}

nlohmann::json ParseJsonText(const std::string& text, const std::string& name) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based offset of the error; turn it into line:column.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    std::string msg = e.what();
    auto pos = msg.find("syntax error");
    if (pos != std::string::npos) msg = msg.substr(pos);
    throw InputError(name + ":" + std::to_string(line) + ":" + std::to_string(col) +
                     ": invalid JSON: " + msg);
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond double's range, e.g. 2e308 (found by tests/fuzz): "number overflow ...".
    std::string msg = e.what();
    auto pos = msg.find("] ");
    throw InputError(name + ": invalid JSON: " + (pos == std::string::npos ? msg : msg.substr(pos + 2)));
  }
}

nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open file for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path + ": read error");
  return ParseJsonText(ss.str(), path);
}

std::string ClosestName(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = static_cast<size_t>(-1);
  std::string lw = word;
  std::transform(lw.begin(), lw.end(), lw.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& c : candidates) {
    std::string lc = c;
    std::transform(lc.begin(), lc.end(), lc.begin(), [](unsigned char x) { return std::tolower(x); });
    size_t d = EditDistance(lw, lc);
    if (d < best_d) { best_d = d; best = c; }
  }
  size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

std::string Describe(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  switch (v.type()) {
    case nlohmann::json::value_t::string: return "string " + s;
    case nlohmann::json::value_t::boolean: return "boolean " + s;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return s;
    case nlohmann::json::value_t::number_float: return s;
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::array: return "array " + s;
    case nlohmann::json::value_t::object: return "object " + s;
    default: return s;
  }
}

StrictReader::StrictReader(const nlohmann::json& obj, std::string file, std::string pointer)
    : obj_(obj), file_(std::move(file)), pointer_(std::move(pointer)) {
  if (!obj_.is_object()) {
    throw InputError(file_ + ":" + (pointer_.empty() ? "/" : pointer_) +
                     ": expected a JSON object, got " + Describe(obj_));
  }
}

std::string StrictReader::Where(const std::string& key) const {
  return file_ + ":" + pointer_ + "/" + EscapePointerToken(key);
}

void StrictReader::Fail(const std::string& key, const std::string& expected,
                        const nlohmann::json& got) const {
  throw InputError(Where(key) + ": expected " + expected + ", got " + Describe(got));
}

bool StrictReader::Has(const std::string& key) const {
  asked_.insert(key);
  return obj_.contains(key);
}

const nlohmann::json& StrictReader::RequiredValue(const std::string& key) {
  asked_.insert(key);
  auto it = obj_.find(key);
  if (it == obj_.end()) {
    throw InputError(file_ + ":" + (pointer_.empty() ? "/" : pointer_) +
                     ": missing required key \"" + key + "\"");
  }
  read_.insert(key);
  return *it;
}

std::optional<nlohmann::json> StrictReader::OptionalValue(const std::string& key) {
  asked_.insert(key);
  auto it = obj_.find(key);
  if (it == obj_.end()) return std::nullopt;
  read_.insert(key);
  return *it;
}

int64_t StrictReader::RequiredInt(const std::string& key, int64_t min, int64_t max) {
  const auto& v = RequiredValue(key);
  std::string expected = "integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      Fail(key, expected, v);
    }
    int64_t x = v.get<int64_t>();
    if (x < min || x > max) Fail(key, expected, v);
    return x;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    // Range before the cast: a double outside int64 is undefined behaviour (found by tests/fuzz).
    if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) {
      int64_t x = static_cast<int64_t>(d);
      if (x >= min && x <= max) return x;
    }
  }
  Fail(key, expected, v);
}

int64_t StrictReader::OptionalInt(const std::string& key, int64_t def, int64_t min, int64_t max) {
  if (!Has(key)) return def;
  return RequiredInt(key, min, max);
}

double StrictReader::RequiredNumber(const std::string& key, double min, double max) {
  const auto& v = RequiredValue(key);
  std::ostringstream e;
  e << "number in [" << min << ", " << max << "]";
  if (!v.is_number()) Fail(key, e.str(), v);
  double x = v.get<double>();
  if (!(x >= min && x <= max)) Fail(key, e.str(), v);
  return x;
}

double StrictReader::OptionalNumber(const std::string& key, double def, double min, double max) {
  if (!Has(key)) return def;
  return RequiredNumber(key, min, max);
}

bool StrictReader::OptionalBool(const std::string& key, bool def) {
  if (!Has(key)) return def;
  const auto& v = RequiredValue(key);
  if (!v.is_boolean()) Fail(key, "true or false", v);
  return v.get<bool>();
}

std::string StrictReader::RequiredString(const std::string& key) {
  const auto& v = RequiredValue(key);
  if (!v.is_string()) Fail(key, "a string", v);
  return v.get<std::string>();
}

std::string StrictReader::OptionalString(const std::string& key, const std::string& def) {
  if (!Has(key)) return def;
  return RequiredString(key);
}

std::string StrictReader::RequiredEnum(const std::string& key,
                                       const std::vector<std::string>& allowed) {
  const auto& v = RequiredValue(key);
  std::string expected = "one of " + Join(allowed, ", ");
  if (!v.is_string()) Fail(key, expected, v);
  std::string s = v.get<std::string>();
  if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
    std::string hint = ClosestName(s, allowed);
    throw InputError(Where(key) + ": expected " + expected + ", got " + Quote(s) +
                     DidYouMean(hint));
  }
  return s;
}

std::string StrictReader::OptionalEnum(const std::string& key, const std::string& def,
                                       const std::vector<std::string>& allowed) {
  if (!Has(key)) return def;
  return RequiredEnum(key, allowed);
}

StrictReader StrictReader::RequiredObject(const std::string& key) {
  const auto& v = RequiredValue(key);
  return StrictReader(v, file_, pointer_ + "/" + EscapePointerToken(key));
}

void StrictReader::Ignore(const std::string& key) {
  asked_.insert(key);
  read_.insert(key);
}

void StrictReader::CheckSchema(const std::string& kind, int max_version) {
  std::string got = RequiredString("schema");
  if (got != kind) {
    throw InputError(Where("schema") + ": expected \"" + kind + "\", got " + Quote(got));
  }
  int64_t version = RequiredInt("schema_version", 1, 1 << 20);
  if (version > max_version) {
    throw InputError(Where("schema_version") + ": this shardtune reads " + kind + " up to version " +
                     std::to_string(max_version) + ", got " + std::to_string(version));
  }
}

void StrictReader::Finish() const {
  std::vector<std::string> known(asked_.begin(), asked_.end());
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (read_.count(it.key())) continue;
    std::string hint = ClosestName(it.key(), known);
    throw InputError(Where(it.key()) + ": unknown key" +
                     DidYouMean(hint));
  }
}

std::vector<int> BlockIndexes(const nlohmann::json& v, const std::string& where, const char* item,
                              const char* items) {
  if (!v.is_array()) throw InputError(where + ": expected an array of " + items + ", got " + Describe(v));
  std::vector<int> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0 || v[i].get<int64_t>() > 100000) {
      throw InputError(where + "/" + std::to_string(i) + ": expected " + item + " (integer >= 0), got " + Describe(v[i]));
    }
    out.push_back(static_cast<int>(v[i].get<int64_t>()));
  }
  return out;
}

}  // namespace shardtune::model
