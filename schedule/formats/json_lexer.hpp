// A small strict JSON (RFC 8259) parser that drives a SAX handler, for the schedule reader:
// nlohmann's lexer alone took ~0.2 s of a 40 MB schedule; this one reads strings in bulk and
// integers without strtoll.
//
// It accepts exactly what nlohmann::json::sax_parse accepts (tests/test_json_lexer.cpp holds it
// against nlohmann as an oracle) and calls the handler the same way: null(), boolean(b),
// number_integer(int64) for negative integers, number_unsigned(uint64) for the others, and
// number_float(double, text) for numbers with a fraction or an exponent and for integers
// beyond 64 bits; string(s), key(s) with a std::string_view valid until the next event, start_object(-1)/end_object(), start_array(-1)/end_array().
// A handler returning false stops the parse.
//
// A handler may also read some objects itself: if it has `const char* claim_object(const char*
// p, const char* end)`, the parser calls it at each '{' (p points at it) before anything else.
// It returns nullptr to decline (having done nothing: the parser then goes on as usual), or
// one past the object's closing '}' when it read the whole object from the text and took it
// as the events of that object would have. It may claim only what this parser accepts, with
// the same meaning (the schedule reader claims the plain shape of a step, in one pass over its
// bytes, and declines anything else, which the events then read and locate as usual). On malformed input it calls
// parse_error(position, message) once, with position the number of bytes read (1-based index
// of the offending byte) and a message in nlohmann's words; it returns what that returns.
//
// Specifics (as nlohmann): a UTF-8 byte-order mark at the start is skipped; strings must be
// well-formed UTF-8 (no overlongs, no encoded surrogates, nothing past U+10FFFF), control
// characters must be escaped, \u escapes of surrogates must pair; a number too large for a
// double ("1E432") is an error; nesting is unbounded (no recursion: an explicit stack, one byte
// per open container); anything but whitespace after the value is an error. One deliberate
// difference: nlohmann ends its input at a NUL byte outside a string (it accepts "{}\0junk");
// RFC 8259 allows no NUL there, and this parser refuses it like any other stray byte.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ppsched {

namespace json_lexer_detail {

inline bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// A byte that stands for itself in a string: printable ASCII other than '"' and '\\'.
inline bool plain(char ch) {
  static constexpr struct Table {
    bool v[256];
    constexpr Table() : v() {
      for (int c = 0x20; c < 0x80; ++c) v[c] = c != '"' && c != '\\';
    }
  } table;
  return table.v[static_cast<unsigned char>(ch)];
}

inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

inline void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Whether Handler has claim_object (see JsonSaxParser).
template <class H, class = void>
struct claims_objects : std::false_type {};
template <class H>
struct claims_objects<H, std::void_t<decltype(std::declval<H&>().claim_object(std::declval<const char*>(),
                                                                               std::declval<const char*>()))>>
    : std::true_type {};

}  // namespace json_lexer_detail

template <class Handler>
class JsonSaxParser {
 public:
  JsonSaxParser(std::string_view text, Handler& h) : p_(text.data()), begin_(text.data()), end_(text.data() + text.size()), h_(h) {}

  // True when the whole text was one well-formed value and the handler never said stop.
  bool parse() {
    if (end_ - p_ >= 3 && p_[0] == '\xEF' && p_[1] == '\xBB' && p_[2] == '\xBF') p_ += 3;
    std::vector<uint8_t> stack;  // 1: object, 0: array
    for (;;) {
      // ---- a value is expected ----
      skip_ws();
      if (p_ == end_) return eof_error("value", "'[', '{', or a literal");
      switch (*p_) {
        case '{':
          if constexpr (json_lexer_detail::claims_objects<Handler>::value) {
            if (const char* past = h_.claim_object(p_, end_)) {
              p_ = past;
              break;
            }
          }
          ++p_;
          if (!h_.start_object(static_cast<std::size_t>(-1))) return false;
          skip_ws();
          if (p_ != end_ && *p_ == '}') {
            ++p_;
            if (!h_.end_object()) return false;
            break;
          }
          if (!read_key("object key")) return false;
          stack.push_back(1);
          continue;
        case '[':
          ++p_;
          if (!h_.start_array(static_cast<std::size_t>(-1))) return false;
          skip_ws();
          if (p_ != end_ && *p_ == ']') {
            ++p_;
            if (!h_.end_array()) return false;
            break;
          }
          stack.push_back(0);
          continue;
        case '"':
          if (!read_string("value")) return false;
          if (!h_.string(str_)) return false;
          break;
        case 't':
          if (!literal("true")) return false;
          if (!h_.boolean(true)) return false;
          break;
        case 'f':
          if (!literal("false")) return false;
          if (!h_.boolean(false)) return false;
          break;
        case 'n':
          if (!literal("null")) return false;
          if (!h_.null()) return false;
          break;
        case '-': case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
          if (!number()) return false;
          break;
        default:
          return unexpected("value", "'[', '{', or a literal");
      }
      // ---- a value is complete: close containers, or find the next element ----
      for (;;) {
        skip_ws();
        if (stack.empty()) {
          if (p_ != end_) return unexpected("value", "end of input");
          return true;
        }
        if (p_ == end_) return eof_error(stack.back() ? "object" : "array", stack.back() ? "'}'" : "']'");
        const char c = *p_;
        if (c == ',') {
          ++p_;
          if (stack.back()) {
            skip_ws();
            if (!read_key("object key")) return false;
          }
          break;  // the next value
        }
        if (stack.back() ? c == '}' : c == ']') {
          ++p_;
          const bool object = stack.back();
          stack.pop_back();
          if (!(object ? h_.end_object() : h_.end_array())) return false;
          continue;
        }
        return unexpected(stack.back() ? "object" : "array", stack.back() ? "'}'" : "']'");
      }
    }
  }

 private:
  void skip_ws() {
    while (p_ != end_ && json_lexer_detail::is_ws(*p_)) ++p_;
  }

  // ---- errors ----
  // `after`: one past the offending byte (nullptr: the end of the input, read as one byte).
  bool error_at(const char* after, std::string message) {
    const std::size_t position = after ? static_cast<std::size_t>(after - begin_)
                                       : static_cast<std::size_t>(end_ - begin_) + 1;
    h_.parse_error(position, message);
    return false;
  }
  bool eof_error(const char* context, const char* expected) {
    return error_at(nullptr, std::string("syntax error while parsing ") + context +
                                  " - unexpected end of input; expected " + expected);
  }
  // The token at p_ is not what the grammar allows here.
  bool unexpected(const char* context, const char* expected) {
    std::string what;
    const char* token_end = p_ + 1;
    const char c = *p_;
    if (c == '"') {
      // Lex the string only to name it (and to report a bad one as such).
      const char* save = p_;
      if (!read_string(context)) return false;
      token_end = p_;
      p_ = save;
      what = "unexpected string literal";
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const char* q = p_ + 1;
      while (q != end_ && (std::isdigit(static_cast<unsigned char>(*q)) || *q == '.' || *q == 'e' || *q == 'E' ||
                           *q == '+' || *q == '-'))
        ++q;
      token_end = q;
      what = "unexpected number literal";
    } else if (c == 't' || c == 'f' || c == 'n') {
      const char* q = p_;
      while (q != end_ && std::isalpha(static_cast<unsigned char>(*q))) ++q;
      token_end = q;
      what = "unexpected literal";
    } else if (c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':') {
      what = std::string("unexpected '") + c + "'";
    } else {
      what = "invalid literal";
    }
    return error_at(token_end, std::string("syntax error while parsing ") + context + " - " + what +
                                   "; expected " + expected);
  }

  // ---- tokens ----
  bool read_key(const char* context) {
    if (p_ == end_) return eof_error(context, "string literal");
    if (*p_ != '"') return unexpected(context, "string literal");
    if (!read_string(context)) return false;
    skip_ws();
    if (p_ == end_) return eof_error("object separator", "':'");
    if (*p_ != ':') return unexpected("object separator", "':'");
    ++p_;
    return h_.key(str_);
  }

  bool literal(const char* word) {
    const char* q = p_;
    for (const char* w = word; *w; ++w, ++q) {
      if (q == end_) return error_at(nullptr, "syntax error while parsing value - invalid literal");
      if (*q != *w) return error_at(q + 1, "syntax error while parsing value - invalid literal");
    }
    p_ = q;
    return true;
  }

  bool string_error(const char* at, const char* what) {
    return error_at(at, std::string("syntax error while parsing value - invalid string: ") + what);
  }

  // p_ at the opening quote; on success str_ is the decoded string (a view of the text, or of
  // buf_ when it had escapes or multi-byte characters) and p_ is past the closing quote.
  bool read_string(const char*) {
    namespace d = json_lexer_detail;
    const char* q = p_ + 1;
    // Most strings are plain ASCII: their view is the text itself.
    {
      const char* run = q;
      while (q != end_ && d::plain(*q)) ++q;
      if (q != end_ && *q == '"') {
        str_ = std::string_view(run, static_cast<size_t>(q - run));
        p_ = q + 1;
        return true;
      }
      buf_.assign(run, static_cast<size_t>(q - run));
    }
    for (;;) {
      // The plain run: printable ASCII other than '"' and '\'.
      const char* run = q;
      while (q != end_ && json_lexer_detail::plain(*q)) ++q;
      buf_.append(run, static_cast<size_t>(q - run));
      if (q == end_) return string_error(nullptr, "missing closing quote");
      const unsigned char c = static_cast<unsigned char>(*q);
      if (c == '"') {
        str_ = buf_;
        p_ = q + 1;
        return true;
      }
      if (c < 0x20) return string_error(q + 1, "control character must be escaped");
      if (c == '\\') {
        if (q + 1 == end_) return string_error(nullptr, "missing closing quote");
        const char e = q[1];
        q += 2;
        switch (e) {
          case '"': buf_ += '"'; break;
          case '\\': buf_ += '\\'; break;
          case '/': buf_ += '/'; break;
          case 'b': buf_ += '\b'; break;
          case 'f': buf_ += '\f'; break;
          case 'n': buf_ += '\n'; break;
          case 'r': buf_ += '\r'; break;
          case 't': buf_ += '\t'; break;
          case 'u': {
            int cp = hex4(q);
            if (cp < 0) return string_error(q, "'\\u' must be followed by 4 hex digits");
            q += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (end_ - q >= 2 && q[0] == '\\' && q[1] == 'u') {
                const int lo = hex4(q + 2);
                if (lo < 0) return string_error(q + 2, "'\\u' must be followed by 4 hex digits");
                if (lo < 0xDC00 || lo > 0xDFFF)
                  return string_error(q + 6, "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                q += 6;
              } else {
                return string_error(q, "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
              }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              return string_error(q, "surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF");
            }
            d::put_utf8(buf_, static_cast<uint32_t>(cp));
            break;
          }
          default: return string_error(q, "forbidden character after backslash");
        }
        continue;
      }
      // A multi-byte UTF-8 sequence (RFC 3629: no overlongs, no surrogates, at most U+10FFFF).
      int more;
      unsigned char lo = 0x80, hi = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) {
        more = 1;
      } else if (c == 0xE0) {
        more = 2, lo = 0xA0;
      } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
        more = 2;
      } else if (c == 0xED) {
        more = 2, hi = 0x9F;
      } else if (c == 0xF0) {
        more = 3, lo = 0x90;
      } else if (c >= 0xF1 && c <= 0xF3) {
        more = 3;
      } else if (c == 0xF4) {
        more = 3, hi = 0x8F;
      } else {
        return string_error(q + 1, "ill-formed UTF-8 byte");
      }
      const char* start = q++;
      for (int k = 0; k < more; ++k, ++q) {
        if (q == end_) return string_error(nullptr, "ill-formed UTF-8 byte");
        const unsigned char b = static_cast<unsigned char>(*q);
        if (b < lo || b > hi) return string_error(q + 1, "ill-formed UTF-8 byte");
        lo = 0x80, hi = 0xBF;
      }
      buf_.append(start, static_cast<size_t>(q - start));
    }
  }

  int hex4(const char* q) const {
    if (end_ - q < 4) return -1;
    int v = 0;
    for (int k = 0; k < 4; ++k) {
      const int h = json_lexer_detail::hex_value(q[k]);
      if (h < 0) return -1;
      v = v * 16 + h;
    }
    return v;
  }

  bool digit(const char* q) const { return q != end_ && *q >= '0' && *q <= '9'; }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number() {
    const char* start = p_;
    const char* q = p_;
    const bool negative = *q == '-';
    if (negative) ++q;
    if (!digit(q)) return error_at(q == end_ ? nullptr : q + 1, "syntax error while parsing value - invalid number; expected digit after '-'");
    uint64_t v = 0;
    bool overflow = false;
    if (*q == '0') {
      ++q;
    } else {
      while (digit(q)) {
        const uint64_t dgt = static_cast<uint64_t>(*q - '0');
        if (v > (UINT64_MAX - dgt) / 10) overflow = true;
        v = v * 10 + dgt;
        ++q;
      }
    }
    bool is_float = false;
    if (q != end_ && *q == '.') {
      ++q;
      if (!digit(q)) return error_at(q == end_ ? nullptr : q + 1, "syntax error while parsing value - invalid number; expected digit after '.'");
      while (digit(q)) ++q;
      is_float = true;
    }
    if (q != end_ && (*q == 'e' || *q == 'E')) {
      ++q;
      if (q != end_ && (*q == '+' || *q == '-')) ++q;
      if (!digit(q)) return error_at(q == end_ ? nullptr : q + 1, "syntax error while parsing value - invalid number; expected digit after exponent sign");
      while (digit(q)) ++q;
      is_float = true;
    }
    p_ = q;
    if (!is_float && !overflow) {
      if (!negative) return h_.number_unsigned(v);
      if (v <= static_cast<uint64_t>(INT64_MAX)) return h_.number_integer(-static_cast<int64_t>(v));
      if (v == static_cast<uint64_t>(INT64_MAX) + 1) return h_.number_integer(INT64_MIN);
    }
    // A fraction, an exponent, or an integer beyond 64 bits: a double, as nlohmann reads it.
    text_.assign(start, static_cast<size_t>(q - start));
    char* stop = nullptr;
    const double d = std::strtod(text_.c_str(), &stop);
    if (!std::isfinite(d)) return error_at(q, "number overflow parsing '" + text_ + "'");
    return h_.number_float(d, std::string_view(text_));
  }

  const char* p_;
  const char* begin_;
  const char* end_;
  Handler& h_;
  std::string buf_;       // a string or key with escapes or multi-byte characters, decoded
  std::string_view str_;  // the string or key just read
  std::string text_;  // a float's text
};

// Parses `text` with `h` (see above); true when it was one well-formed value.
template <class Handler>
bool parse_json_sax(std::string_view text, Handler& h) {
  return JsonSaxParser<Handler>(text, h).parse();
}

}  // namespace ppsched
