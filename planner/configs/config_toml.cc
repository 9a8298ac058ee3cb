// TOML subset reader (see the header). Rules from the TOML 1.0.0 specification (toml.io/en/v1.0.0):
// tables, key/value pairs, basic and literal strings, integers, floats, booleans, arrays.
#include "planner/configs/config_toml.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "model/errors.h"
#include "model/text.h"
#include "planner/configs/config_yaml.h"

namespace shardtune::configs {
namespace {

using Json = nlohmann::ordered_json;

using model::Trim;

bool BareKeyChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool TableHeader(const std::string& t) {
  if (t.size() < 3 || t.front() != '[' || t.back() != ']' || t[1] == '[') return false;
  for (size_t i = 1; i + 1 < t.size(); ++i) {
    if (!BareKeyChar(t[i]) && t[i] != '.' && t[i] != ' ') return false;
  }
  return true;
}

class LineParser {
 public:
  LineParser(const std::string& s, std::string where) : s_(s), where_(std::move(where)) {}

  [[noreturn]] void Fail(const std::string& expected) const {
    std::string rest = pos_ < s_.size() ? "\"" + model::EscapeControls(s_.substr(pos_)) + "\"" : "the line's end";
    throw InputError(where_ + ": expected " + expected + ", got " + rest);
  }
  void Skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  bool AtEndOrComment() {
    Skip();
    return pos_ >= s_.size() || s_[pos_] == '#';
  }

  Json Value() {
    Skip();
    if (pos_ >= s_.size()) Fail("a value");
    char c = s_[pos_];
    if (c == '"') return BasicString();
    if (c == '\'') return LiteralString();
    if (c == '[') return Array();
    if (c == '{') Fail("a value other than an inline table (not read here)");
    return Scalar();
  }

 private:
  Json BasicString() {
    if (s_.compare(pos_, 3, "\"\"\"") == 0) Fail("a one-line string (multi-line strings are not read here)");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) Fail("an escape after \\");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) Fail("four hex digits after \\u");
          unsigned cp = 0;
          for (int i = 0; i < 4; ++i) {
            char h = s_[pos_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') cp |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') cp |= static_cast<unsigned>(h - 'A' + 10);
            else Fail("a hex digit in \\u");
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) Fail("a \\u escape that is not a surrogate");
          AppendUtf8(cp, &out);
          break;
        }
        default: --pos_; Fail("one of the escapes \\\" \\\\ \\n \\t \\r \\b \\f \\uXXXX");
      }
    }
    if (pos_ >= s_.size()) Fail("a closing \"");
    ++pos_;
    return out;
  }

  Json LiteralString() {
    if (s_.compare(pos_, 3, "'''") == 0) Fail("a one-line string (multi-line strings are not read here)");
    size_t end = s_.find('\'', pos_ + 1);
    if (end == std::string::npos) Fail("a closing '");
    std::string out = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return out;
  }

  Json Array() {
    ++pos_;
    Json a = Json::array();
    Skip();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return a;
    }
    while (true) {
      Skip();
      if (pos_ >= s_.size()) Fail("the array's closing ] on the same line (multi-line arrays are not read here)");
      if (s_[pos_] == '[') Fail("an array of scalars (nested arrays are not read here)");
      a.push_back(Value());
      Skip();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        Skip();
        if (pos_ < s_.size() && s_[pos_] == ']') {  // a trailing comma
          ++pos_;
          return a;
        }
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return a;
      }
      Fail(", or ] in the array");
    }
  }

  Json Scalar() {
    size_t end = pos_;
    while (end < s_.size() && s_[end] != ',' && s_[end] != ']' && s_[end] != '#' && s_[end] != ' ' &&
           s_[end] != '\t') {
      ++end;
    }
    const std::string tok = s_.substr(pos_, end - pos_);
    if (tok.empty()) Fail("a value");
    pos_ = end;
    if (tok == "true") return true;
    if (tok == "false") return false;
    if (tok == "inf" || tok == "+inf") return std::numeric_limits<double>::infinity();
    if (tok == "-inf") return -std::numeric_limits<double>::infinity();
    std::string digits;
    for (size_t i = 0; i < tok.size(); ++i) {
      if (tok[i] == '_') {
        // TOML: an underscore must sit between two digits.
        if (i == 0 || i + 1 >= tok.size() || !std::isdigit(static_cast<unsigned char>(tok[i - 1])) ||
            !std::isdigit(static_cast<unsigned char>(tok[i + 1]))) {
          pos_ -= tok.size();
          Fail("a number with _ only between digits");
        }
        continue;
      }
      digits += tok[i];
    }
    const bool is_float = digits.find_first_of(".eE") != std::string::npos;
    try {
      size_t used = 0;
      if (is_float) {
        double v = std::stod(digits, &used);
        if (used == digits.size() && std::isfinite(v)) return v;
      } else {
        long long v = std::stoll(digits, &used, 10);
        if (used == digits.size()) return v;
      }
    } catch (const std::exception&) {
    }
    pos_ -= tok.size();
    Fail("a string (quoted), a number, true, false or an array");
  }

  const std::string& s_;
  std::string where_;
  size_t pos_ = 0;
};

}  // namespace

bool LooksLikeToml(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (TableHeader(Trim(line))) return true;
  }
  return false;
}

nlohmann::ordered_json ParseTomlSubset(const std::string& text, const std::string& file) {
  CheckUtf8(text, file);
  Json doc = Json::object();
  Json* table = &doc;
  std::istringstream in(text);
  std::string raw;
  for (int n = 1; std::getline(in, raw); ++n) {
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string where = file + ":" + std::to_string(n);
    const std::string t = Trim(raw);
    if (t.empty() || t[0] == '#') continue;
    if (t[0] == '[') {
      // "[a.b]  # comment": the header is what precedes an optional comment.
      const size_t close = t.find(']');
      const std::string header = close == std::string::npos ? t : t.substr(0, close + 1);
      const std::string after = close == std::string::npos ? "" : Trim(t.substr(close + 1));
      if (!TableHeader(header) || (!after.empty() && after[0] != '#')) {
        throw InputError(where + ": expected a table header [name] or [a.b] (bare names; arrays "
                                 "of tables are not read here), got \"" + model::EscapeControls(t) + "\"");
      }
      table = &doc;
      std::string path = Trim(header.substr(1, header.size() - 2));
      std::stringstream parts(path);
      std::string part;
      bool last_new = false;
      while (std::getline(parts, part, '.')) {
        part = Trim(part);
        if (part.empty()) {
          throw InputError(where + ": expected a table name, got \"" + model::EscapeControls(t) + "\"");
        }
        if (!table->contains(part)) {
          (*table)[part] = Json::object();
          last_new = true;
        } else if (!(*table)[part].is_object()) {
          throw InputError(where + ": expected a new table, got [" + path + "], whose name holds a value");
        } else {
          last_new = false;
        }
        table = &(*table)[part];
      }
      if (!last_new) throw InputError(where + ": expected each table once, got [" + path + "] again");
      continue;
    }
    const size_t eq = t.find('=');
    const std::string key = eq == std::string::npos ? "" : Trim(t.substr(0, eq));
    bool bare = !key.empty();
    for (char c : key) bare = bare && BareKeyChar(c);
    if (!bare) {
      throw InputError(where + ": expected key = value with a bare key (A-Za-z0-9_-), got \"" +
                       model::EscapeControls(t) + "\"");
    }
    if (table->contains(key)) {
      throw InputError(where + ": expected each key once in its table, got \"" + key + "\" again");
    }
    const std::string rest = t.substr(eq + 1);
    LineParser p(rest, where);
    Json v = p.Value();
    if (!p.AtEndOrComment()) p.Fail("the line to end after the value (or a # comment)");
    (*table)[key] = std::move(v);
  }
  return doc;
}

}  // namespace shardtune::configs
