// Small text helpers every layer's messages use (vocabulary header: no dependencies beyond
// model/units.h, so any folder may include it).
#pragma once

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "model/units.h"

namespace shardtune::model {

// `s` in lower case (ASCII; names, flags and keys compared case-insensitively).
inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The pieces of `text` between `sep`s as given, empty ones included: Split("1,,2", ',') ->
// {"1", "", "2"}, Split("", ',') -> {""}.
inline std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(sep, start);
    items.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return items;
    start = at + 1;
  }
}

// The items of a comma-separated list as given, empty ones included: "1,,2" -> {"1", "", "2"},
// "" -> {""}. Callers reject the empty ones with their own message.
inline std::vector<std::string> SplitCommas(const std::string& text) { return Split(text, ','); }

// `s` without leading and trailing spaces and tabs.
inline std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

// The decimal integer at the start of `text` (an optional '-', then digits; no sign '+', no
// leading space) and how many characters it took (`*used`), when there is one that fits int64_t;
// else nullopt with *used 0. For values that may carry a suffix (SLURM's "4(x2)").
inline std::optional<int64_t> ParseLeadingInt64(const std::string& text, size_t* used) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const std::from_chars_result r = std::from_chars(text.data(), end, v);
  *used = r.ec == std::errc() ? static_cast<size_t>(r.ptr - text.data()) : 0;
  if (*used == 0) return std::nullopt;
  return v;
}

// `text` as a whole decimal integer (ParseLeadingInt64 taking every character), else nullopt:
// "12", "-3"; not "12abc", " 12", "+1", "" or a value beyond int64_t. The one parser behind the
// flags and keys that take an integer, so each refuses the same texts.
inline std::optional<int64_t> ParseInt64(const std::string& text) {
  size_t used = 0;
  std::optional<int64_t> v = ParseLeadingInt64(text, &used);
  if (!v || used != text.size()) return std::nullopt;
  return v;
}

// The items with `sep` between them: Join({"a", "b"}, ", ") == "a, b".
inline std::string Join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// The suffix every unknown-name message ends with: " (did you mean \"hint\"?)", or "" when no
// name was close enough to suggest.
inline std::string DidYouMean(const std::string& hint) {
  return hint.empty() ? "" : " (did you mean \"" + hint + "\"?)";
}

// `s` with its control characters written as JSON writes them (\u000a): every message and
// warning is one line. Leaves everything else, so applying it twice changes nothing more.
inline std::string EscapeControls(const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += "\\u00";
      out += kHex[(c >> 4) & 0xf];
      out += kHex[c & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

// `s` safe inside XML/SVG text and attribute values (&, <, >, " escaped).
inline std::string EscapeXml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// True when `s` ends with `tail`.
inline bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A file name that ends in `ext` with a name before it ("m.svg", not ".svg").
inline bool HasExtension(const std::string& path, const std::string& ext) {
  return path.size() > ext.size() && EndsWith(path, ext);
}

// `v` printed with a printf format for one double: FormatNumber(2.345, "%.1f") == "2.3".
inline std::string FormatNumber(double v, const char* printf_format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, v);
  return buf;
}

// "83.1 GiB" (binary units, one decimal).
inline std::string GiBText(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", b.gib());
  return buf;
}

}  // namespace shardtune::model
