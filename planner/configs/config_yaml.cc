// The YAML subset reader: lines -> (indent, content) after comments are cut, then a recursive
// descent over indentation for block collections and a character scanner for flow collections.
#include "planner/configs/config_yaml.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <vector>

#include "model/errors.h"

namespace shardtune::configs {
namespace {

using nlohmann::ordered_json;

struct Line {
  int number = 0;  // 1-based, for messages
  int indent = 0;
  std::string text;  // without indentation, comment and trailing spaces
};

// Cuts a comment: '#' at the start or after a space, outside quotes.
std::string StripComment(const std::string& s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (quote == '"' && c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
    } else if (c == '"' || c == '\'') {
      // A quote opens a quoted scalar only where one can start, not inside a plain word (it's).
      if (i == 0 || std::string(" [{,:-").find(s[i - 1]) != std::string::npos) quote = c;
    } else if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return s.substr(0, i);
    }
  }
  return s;
}

std::string TrimRight(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

// A string as a JSON string literal: quoted, control characters escaped, so that a message that
// shows it stays one line (a key may hold "\n" written as an escape).
std::string Quote(const std::string& s) {
  return ordered_json(s).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string Hex(unsigned char c) {
  static const char kHex[] = "0123456789ABCDEF";
  return std::string("0x") + kHex[c >> 4] + kHex[c & 0xF];
}

// Where `s` stops being printable UTF-8 (YAML 1.2 c-printable less the C1 controls: tab and
// printable ASCII, and well-formed multi-byte sequences of code points U+00A0 and up), or npos.
// `*why` says what was found there. `text_only` false: only checks that `s` is UTF-8 (JSON, whose
// reader handles control characters).
size_t BadByte(const std::string& s, std::string* why, bool text_only = true) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (text_only && ((c < 0x20 && c != '\t') || c == 0x7F)) {
        *why = "the control character " + Hex(c);
        return i;
      }
      ++i;
      continue;
    }
    int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (c > 0xF4) n = 0;
    uint32_t cp = n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    bool ok = n != 0 && i + static_cast<size_t>(n) <= s.size();
    for (int k = 1; ok && k < n; ++k) {
      auto d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((d & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates, beyond U+10FFFF, and C1 controls are not text.
    if (ok && ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
               (cp >= 0xD800 && cp <= 0xDFFF) || (text_only && cp >= 0x80 && cp < 0xA0))) {
      ok = false;
    }
    if (!ok) {
      *why = "the byte " + Hex(c);
      return i;
    }
    if (text_only && (cp == 0x2028 || cp == 0x2029)) {  // YAML 1.1 line breaks; here only \n
      *why = cp == 0x2028 ? "the line separator U+2028" : "the paragraph separator U+2029";
      return i;
    }
    i += static_cast<size_t>(n);
  }
  return std::string::npos;
}

// Collections nested deeper than this are rejected: no trainer config comes close, and the
// reader (and nlohmann's dump and destructor) recurse once per level.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(const std::string& text, std::string file, YamlFlavor flavor)
      : file_(std::move(file)), flavor_(flavor) {
    Split(text);
  }

  ordered_json Document() {
    if (lines_.empty()) return ordered_json::object();
    if (lines_[0].indent != 0) Fail(lines_[0], "a key at column 1", "indentation");
    ordered_json doc = Block(0);
    if (pos_ < lines_.size())
      Fail(lines_[pos_], "a key at column 1", "\"" + lines_[pos_].text + "\"");
    return doc;
  }

 private:
  [[noreturn]] void Fail(const Line& l, const std::string& expected, const std::string& got) const {
    throw InputError(file_ + ":" + std::to_string(l.number) + ": expected " + expected + ", got " +
                     got);
  }

  void Split(const std::string& text) {
    // A UTF-8 byte order mark may open the stream (YAML 1.2 5.2).
    size_t start = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
    int number = 0;
    std::vector<std::string> raws;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      std::string raw =
          text.substr(start, end == std::string::npos ? std::string::npos : end - start);
      ++number;
      start = end == std::string::npos ? text.size() + 1 : end + 1;
      if (!raw.empty() && raw.back() == '\r') raw.pop_back();  // CRLF line ends
      std::string why;
      size_t bad = BadByte(raw, &why);
      if (bad != std::string::npos) {
        Fail(Line{number, 0, ""}, "printable UTF-8 text",
             why + " at column " + std::to_string(bad + 1));
      }
      raws.push_back(raw);
    }
    for (size_t n = 0; n < raws.size(); ++n) {
      std::string s = TrimRight(StripComment(raws[n]));
      size_t ind = s.find_first_not_of(' ');
      if (ind == std::string::npos) continue;
      Line l{static_cast<int>(n + 1), static_cast<int>(ind), s.substr(ind)};
      if (l.text[0] == '\t') Fail(l, "spaces for indentation", "a tab");
      if (l.text == "---" && lines_.empty()) continue;
      if (l.text == "---" || l.text == "...") Fail(l, "one YAML document", "\"" + l.text + "\"");
      lines_.push_back(l);
      // A block scalar's header ("key: |", "- >-"): its content is the following lines that are
      // blank or indented past the header's line, taken raw (comments and blank lines are text).
      if (!BlockHeader(l.text).empty()) {
        std::vector<std::string>& body = blocks_[l.number];
        while (n + 1 < raws.size()) {
          const std::string& next = raws[n + 1];
          size_t first = next.find_first_not_of(' ');
          bool blank = first == std::string::npos;
          if (!blank && static_cast<int>(first) <= l.indent) break;
          body.push_back(next);
          ++n;
        }
      }
    }
  }

  // The block-scalar indicator ending `t` ("|", ">-", "|2+"), or "" when `t` ends in none: the
  // whole line, or what follows "key: " or "- ".
  static std::string BlockHeader(const std::string& t) {
    size_t i = t.find_last_of("|>");
    if (i == std::string::npos) return "";
    std::string ind = t.substr(i);
    for (size_t k = 1; k < ind.size(); ++k) {
      if (ind[k] != '-' && ind[k] != '+' && (ind[k] < '1' || ind[k] > '9')) return "";
    }
    if (ind.size() > 3) return "";
    if (i == 0 || (i >= 2 && (t.compare(i - 2, 2, ": ") == 0 || t.compare(i - 2, 2, "- ") == 0))) {
      return ind;
    }
    return "";
  }

  // YAML 1.2 8.1 block scalars: literal (|) keeps the line breaks, folded (>) joins lines of the
  // content's own indentation with a space (an empty line is a line break; more-indented lines
  // keep theirs); chomping: clip (one final line break), strip (-: none), keep (+: all). The
  // content's indentation is its first non-blank line's, or the header's digit past `parent`.
  ordered_json BlockScalar(const Line& l, const std::string& header, int parent) {
    const char style = header[0];
    char chomp = ' ';
    int explicit_indent = 0;
    for (size_t k = 1; k < header.size(); ++k) {
      if (header[k] == '-' || header[k] == '+') {
        chomp = header[k];
      } else {
        explicit_indent = header[k] - '0';
      }
    }
    const std::vector<std::string>& body = blocks_[l.number];
    int indent = explicit_indent > 0 ? parent + explicit_indent : -1;
    if (indent < 0) {
      for (const std::string& b : body) {
        size_t f = b.find_first_not_of(' ');
        if (f != std::string::npos) {
          indent = static_cast<int>(f);
          break;
        }
      }
    }
    std::vector<std::string> content;
    for (size_t k = 0; k < body.size(); ++k) {
      const std::string& b = body[k];
      size_t f = b.find_first_not_of(' ');
      if (f == std::string::npos) {
        content.push_back("");
        continue;
      }
      if (static_cast<int>(f) < indent) {
        Fail(Line{l.number + static_cast<int>(k) + 1, static_cast<int>(f), ""},
             "the block scalar's indentation of " + std::to_string(indent) + " spaces",
             std::to_string(f) + " spaces");
      }
      content.push_back(b.substr(static_cast<size_t>(indent)));
    }
    size_t last = content.size();
    while (last > 0 && content[last - 1].empty()) --last;
    std::string text;
    int empties = 0;  // empty lines since the last text line
    bool started = false;
    bool prev_normal = false;  // the last text line is not more-indented
    for (size_t k = 0; k < last; ++k) {
      const std::string& c = content[k];
      if (c.empty()) {
        ++empties;
        continue;
      }
      const bool normal = c[0] != ' ';
      if (!started) {
        text += std::string(static_cast<size_t>(empties), '\n');
      } else if (style == '>' && prev_normal && normal) {
        text += empties == 0 ? std::string(" ") : std::string(static_cast<size_t>(empties), '\n');
      } else {
        text += std::string(static_cast<size_t>(empties) + 1, '\n');
      }
      text += c;
      started = true;
      prev_normal = normal;
      empties = 0;
    }
    if (last > 0 && chomp != '-') text += '\n';
    if (chomp == '+') text += std::string(content.size() - last, '\n');
    return text;
  }

  static bool IsSeqItem(const std::string& t) { return t == "-" || t.rfind("- ", 0) == 0; }

  // Counts one level of nesting while alive; more than kMaxDepth is an InputError.
  class Nest {
   public:
    Nest(Parser* p, const Line& l) : p_(p) {
      if (++p_->depth_ > kMaxDepth) {
        p_->Fail(l, "at most " + std::to_string(kMaxDepth) + " levels of nested collections",
                 "more");
      }
    }
    ~Nest() { --p_->depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser* p_;
  };

  // The collection whose first line is lines_[pos_], at `indent`.
  ordered_json Block(int indent) {
    Nest nest(this, lines_[pos_]);
    return IsSeqItem(lines_[pos_].text) ? Sequence(indent) : Mapping(indent);
  }

  // A value that starts on the next line: a deeper block, a sequence at the key's own indent
  // ("key:\n- a"), or nothing (null).
  ordered_json Nested(int key_indent) {
    if (pos_ >= lines_.size()) return nullptr;
    const Line& next = lines_[pos_];
    if (next.indent > key_indent && !IsSeqItem(next.text) &&
        KeyEnd(next.text) == std::string::npos) {
      // "key:\n    value": a scalar (or flow collection) that starts on the next, more indented
      // line, as ROLL's agentic configs write "SimpleSokoban:\n    ${custom_env.SimpleSokoban}".
      const Line l = next;
      std::string value = l.text;
      ++pos_;
      if (std::string("[{\"'|>&*!").find(value[0]) == std::string::npos) {
        while (pos_ < lines_.size() && lines_[pos_].indent > key_indent &&
               !IsSeqItem(lines_[pos_].text) && KeyEnd(lines_[pos_].text) == std::string::npos) {
          value += " " + lines_[pos_++].text;
        }
      }
      return InlineValue(l, value);
    }
    if (next.indent > key_indent) return Block(next.indent);
    if (next.indent == key_indent && IsSeqItem(next.text)) return Sequence(key_indent);
    return nullptr;
  }

  ordered_json Sequence(int indent) {
    ordered_json seq = ordered_json::array();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && IsSeqItem(lines_[pos_].text)) {
      Line& l = lines_[pos_];
      std::string rest = l.text.size() > 1 ? l.text.substr(1) : "";
      size_t off = rest.find_first_not_of(' ');
      if (off == std::string::npos) {
        ++pos_;
        ordered_json v = pos_ < lines_.size() && lines_[pos_].indent > indent
                             ? Block(lines_[pos_].indent)
                             : ordered_json(nullptr);
        seq.push_back(v);
        continue;
      }
      int item_indent = indent + 1 + static_cast<int>(off);
      std::string item = rest.substr(off);
      if (KeyEnd(item) != std::string::npos || IsSeqItem(item)) {
        // "- key: v" (or "- - x"): the item is a block collection starting at the item's column.
        l.indent = item_indent;
        l.text = item;
        seq.push_back(Block(item_indent));
      } else {
        ++pos_;
        seq.push_back(InlineValue(l, item));
      }
    }
    return seq;
  }

  // Where the key of "key: value" ends (the ':'), or npos when `t` is not a mapping entry.
  static size_t KeyEnd(const std::string& t) {
    if (t.empty() || t[0] == '[' || t[0] == '{') return std::string::npos;
    size_t i = 0;
    if (t[0] == '"' || t[0] == '\'') {
      char q = t[0];
      for (i = 1; i < t.size(); ++i) {
        if (q == '"' && t[i] == '\\') {
          ++i;
        } else if (t[i] == q) {
          if (q == '\'' && i + 1 < t.size() && t[i + 1] == '\'') {
            ++i;
            continue;
          }
          break;
        }
      }
      ++i;
      return i < t.size() && t[i] == ':' && (i + 1 == t.size() || t[i + 1] == ' ')
                 ? i
                 : std::string::npos;
    }
    for (i = 0; i < t.size(); ++i) {
      if (t[i] == ':' && (i + 1 == t.size() || t[i + 1] == ' ')) return i;
    }
    return std::string::npos;
  }

  ordered_json Mapping(int indent) {
    ordered_json map = ordered_json::object();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent) {
      const Line l = lines_[pos_];
      if (IsSeqItem(l.text)) Fail(l, "a key (\"name: value\")", "a list item");
      size_t colon = KeyEnd(l.text);
      if (colon == std::string::npos) Fail(l, "\"key: value\"", "\"" + l.text + "\"");
      std::string key_text = l.text.substr(0, colon);
      ordered_json key = Scalar(l, key_text, /*quoted_only_strings=*/true);
      if (!key.is_string()) key = key_text;  // "1: x" or "true: y": the key is its text
      std::string k = key.get<std::string>();
      if (k.empty() || k[0] == '&' || k[0] == '*' || k[0] == '!' || k[0] == '?') {
        Fail(l, "a plain or quoted key", "\"" + key_text + "\"");
      }
      if (map.contains(k)) Fail(l, "each key once in a mapping", "a second " + Quote(k));
      std::string rest = l.text.substr(colon + 1);
      size_t off = rest.find_first_not_of(' ');
      ++pos_;
      if (off == std::string::npos) {
        map[k] = Nested(indent);
      } else {
        std::string value = rest.substr(off);
        // A plain scalar may continue on more indented lines (folded with a space).
        char c = value[0];
        if (std::string("[{\"'|>&*!").find(c) == std::string::npos) {
          while (pos_ < lines_.size() && lines_[pos_].indent > indent &&
                 !IsSeqItem(lines_[pos_].text) && KeyEnd(lines_[pos_].text) == std::string::npos) {
            value += " " + lines_[pos_++].text;
          }
        }
        map[k] = InlineValue(l, value);
      }
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
      Fail(lines_[pos_], "indentation of " + std::to_string(indent) + " spaces (or less)",
           std::to_string(lines_[pos_].indent) + " spaces");
    }
    return map;
  }

  // A value written after "key: " or "- ": a flow collection (possibly continued on the next,
  // more indented lines) or a scalar.
  ordered_json InlineValue(const Line& l, std::string text) {
    char c = text[0];
    if (c == '&' || c == '*') Fail(l, "a value (anchors and aliases are not supported)", text);
    if (c == '!') Fail(l, "a value (tags are not supported)", text);
    if ((c == '|' || c == '>') && text.size() <= 3 && BlockHeader(text) == text) {
      return BlockScalar(l, text, l.indent);
    }
    if (c == '[' || c == '{') {
      while (!Balanced(text) && pos_ < lines_.size()) text += " " + lines_[pos_++].text;
      size_t i = 0;
      ordered_json v = Flow(l, text, &i);
      SkipSpaces(text, &i);
      if (i != text.size()) Fail(l, "the end of the line after a flow collection", text.substr(i));
      return v;
    }
    return Scalar(l, text, false);
  }

  static bool Balanced(const std::string& t) {
    int depth = 0;
    char quote = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      char c = t[i];
      if (quote) {
        if (quote == '"' && c == '\\')
          ++i;
        else if (c == quote)
          quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ']' || c == '}') {
        --depth;
      }
    }
    return depth <= 0;
  }

  static void SkipSpaces(const std::string& t, size_t* i) {
    while (*i < t.size() && t[*i] == ' ') ++*i;
  }

  ordered_json Flow(const Line& l, const std::string& t, size_t* i) {
    SkipSpaces(t, i);
    if (*i >= t.size()) Fail(l, "a value", "the end of the line");
    char open = t[*i];
    if (open != '[' && open != '{') return FlowScalar(l, t, i);
    Nest nest(this, l);
    char close = open == '[' ? ']' : '}';
    ++*i;
    ordered_json out = open == '[' ? ordered_json::array() : ordered_json::object();
    SkipSpaces(t, i);
    if (*i < t.size() && t[*i] == close) {
      ++*i;
      return out;
    }
    while (true) {
      if (open == '[') {
        out.push_back(Flow(l, t, i));
      } else {
        ordered_json key = FlowScalar(l, t, i);
        std::string k = key.is_string() ? key.get<std::string>() : key.dump();
        SkipSpaces(t, i);
        if (*i >= t.size() || t[*i] != ':')
          Fail(l, "':' after the key " + Quote(k), *i < t.size() ? t.substr(*i) : "the end");
        ++*i;
        if (out.contains(k)) Fail(l, "each key once in a mapping", "a second " + Quote(k));
        out[k] = Flow(l, t, i);
      }
      SkipSpaces(t, i);
      if (*i < t.size() && t[*i] == ',') {
        ++*i;
        SkipSpaces(t, i);
        if (*i < t.size() && t[*i] == close) {  // trailing comma
          ++*i;
          return out;
        }
        continue;
      }
      if (*i < t.size() && t[*i] == close) {
        ++*i;
        return out;
      }
      Fail(l, std::string("',' or '") + close + "'", *i < t.size() ? t.substr(*i) : "the end");
    }
  }

  ordered_json FlowScalar(const Line& l, const std::string& t, size_t* i) {
    size_t start = *i;
    if (t[*i] == '"' || t[*i] == '\'') {
      char q = t[*i];
      for (++*i; *i < t.size(); ++*i) {
        if (q == '"' && t[*i] == '\\') {
          ++*i;
        } else if (t[*i] == q) {
          if (q == '\'' && *i + 1 < t.size() && t[*i + 1] == '\'') {
            ++*i;
            continue;
          }
          break;
        }
      }
      *i = std::min(*i + 1, t.size());  // past the closing quote (or the end when unclosed)
      return Scalar(l, t.substr(start, *i - start), false);
    }
    while (*i < t.size() && t[*i] != ',' && t[*i] != ']' && t[*i] != '}' &&
           !(t[*i] == ':' && (*i + 1 == t.size() || t[*i + 1] == ' '))) {
      ++*i;
    }
    return Scalar(l, TrimRight(t.substr(start, *i - start)), false);
  }

  ordered_json Scalar(const Line& l, const std::string& s, bool quoted_only_strings) {
    if (s.empty()) return nullptr;
    if (s[0] == '"') return DoubleQuoted(l, s);
    if (s[0] == '\'') {
      if (s.size() < 2 || s.back() != '\'') Fail(l, "a closing '", s);
      std::string out;
      for (size_t i = 1; i + 1 < s.size(); ++i) {
        out += s[i];
        if (s[i] == '\'') ++i;  // '' is one quote
      }
      return out;
    }
    if (quoted_only_strings) return s;
    return Plain(s);
  }

  ordered_json DoubleQuoted(const Line& l, const std::string& s) {
    if (s.size() < 2 || s.back() != '"') Fail(l, "a closing \"", s);
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] != '\\') {
        out += s[i];
        continue;
      }
      if (i + 2 >= s.size()) Fail(l, "an escape after \\", s);
      char e = s[++i];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'x':
        case 'u':
        case 'U': {
          // \xXX, \uXXXX (a UTF-16 surrogate pair as two), \UXXXXXXXX: a code point as UTF-8.
          uint32_t cp = HexDigits(l, s, &i, e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (cp >= 0xD800 && cp <= 0xDBFF && e == 'u' && i + 6 < s.size() && s[i + 1] == '\\' &&
              s[i + 2] == 'u') {
            size_t j = i + 2;
            uint32_t low = HexDigits(l, s, &j, 4);
            if (low >= 0xDC00 && low <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
              i = j;
            }
          }
          if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
            Fail(l, "escapes of Unicode characters (no lone UTF-16 surrogate, none past U+10FFFF)",
                 s);
          }
          AppendUtf8(cp, &out);
          break;
        }
        default:
          Fail(l, "a known escape (\\n \\t \\\" \\\\ \\xXX \\uXXXX \\UXXXXXXXX)",
               static_cast<unsigned char>(e) < 0x80 ? std::string("\\") + e
                                                    : "\\ before a non-ASCII character");
      }
    }
    return out;
  }

  // The `digits` hex digits after s[*i] (the escape letter); leaves *i on the last one.
  uint32_t HexDigits(const Line& l, const std::string& s, size_t* i, int digits) const {
    uint32_t v = 0;
    for (int k = 1; k <= digits; ++k) {
      size_t j = *i + static_cast<size_t>(k);
      // The closing quote is s.back(): a digit must come before it.
      if (j + 1 >= s.size() || std::isxdigit(static_cast<unsigned char>(s[j])) == 0) {
        Fail(l, std::to_string(digits) + " hex digits after \\" + s[*i], s);
      }
      auto c = static_cast<unsigned char>(s[j]);
      int digit = std::isdigit(c) != 0 ? c - '0' : std::tolower(c) - 'a' + 10;
      v = v * 16 + static_cast<uint32_t>(digit);
    }
    *i += static_cast<size_t>(digits);
    return v;
  }

  ordered_json Plain(const std::string& s) const {
    static const char* kNull[] = {"~", "null", "Null", "NULL"};
    static const char* kTrue[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char* kFalse[] = {"false", "False", "FALSE", "no", "No",
                                   "NO",    "off",   "Off",   "OFF"};
    for (const char* n : kNull)
      if (s == n) return nullptr;
    for (const char* t : kTrue)
      if (s == t) return true;
    for (const char* f : kFalse)
      if (s == f) return false;
    if (s == ".inf" || s == "+.inf" || s == ".Inf") return std::numeric_limits<double>::infinity();
    if (s == "-.inf" || s == "-.Inf") return -std::numeric_limits<double>::infinity();
    std::string digits = s;
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    size_t d = digits[0] == '-' || digits[0] == '+' ? 1 : 0;
    if (d < digits.size() && std::all_of(digits.begin() + static_cast<long>(d), digits.end(),
                                         [](unsigned char c) { return std::isdigit(c) != 0; })) {
      errno = 0;
      long long v = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == 0) return static_cast<int64_t>(v);
    }
    // A float needs a '.' in YAML 1.1 (PyYAML reads 1e-5 as a string, 1.0e-5 as a float);
    // OmegaConf's loader (omegaconf/_utils.py get_yaml_loader) adds the form
    // [-+]?[0-9][0-9_]*[eE][-+]?[0-9]+, so 1e-5 is a float there.
    char* end = nullptr;
    double v = std::strtod(digits.c_str(), &end);
    bool exponent_only = false;
    if (flavor_ == YamlFlavor::kOmegaConf && d < digits.size() &&
        std::isdigit(static_cast<unsigned char>(digits[d])) != 0) {
      size_t e = digits.find_first_of("eE");
      size_t x = e == std::string::npos ? e : e + 1;
      if (x != std::string::npos && x < digits.size() && (digits[x] == '-' || digits[x] == '+')) ++x;
      auto all_digits = [&](size_t a, size_t b) {
        return a < b && std::all_of(digits.begin() + static_cast<long>(a), digits.begin() + static_cast<long>(b),
                                    [](unsigned char c) { return std::isdigit(c) != 0; });
      };
      exponent_only = e != std::string::npos && all_digits(d, e) && all_digits(x, digits.size());
    }
    bool numeric = end == digits.c_str() + digits.size() && d < digits.size() &&
                   (std::isdigit(static_cast<unsigned char>(digits[d])) != 0 || digits[d] == '.') &&
                   (digits.find('.') != std::string::npos || exponent_only) &&
                   digits.find_first_of("xXnN") == std::string::npos;
    if (numeric) return v;
    return s;
  }

  std::string file_;
  YamlFlavor flavor_;
  std::vector<Line> lines_;
  std::map<int, std::vector<std::string>> blocks_;  // a block scalar's raw lines, by header line
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

void CheckUtf8(const std::string& text, const std::string& file) {
  size_t line_start = 0;
  int line = 1;
  while (line_start <= text.size()) {
    size_t end = text.find('\n', line_start);
    std::string raw = text.substr(line_start, end == std::string::npos ? std::string::npos
                                                                       : end - line_start);
    std::string why;
    size_t bad = BadByte(raw, &why, /*text_only=*/false);
    if (bad != std::string::npos) {
      throw InputError(file + ":" + std::to_string(line) + ": expected UTF-8 text, got " + why +
                       " at column " + std::to_string(bad + 1));
    }
    if (end == std::string::npos) break;
    line_start = end + 1;
    ++line;
  }
}

nlohmann::ordered_json ParseYamlSubset(const std::string& text, const std::string& file, YamlFlavor flavor) {
  return Parser(text, file, flavor).Document();
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}


}  // namespace shardtune::configs
