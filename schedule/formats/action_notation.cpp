// PyTorch's compact action notation (action_notation.hpp).
//
// Differences from PyTorch's own parser, on purpose: the whole text must match (PyTorch's
// regex `match` accepts trailing junk), and canonical step names are accepted as tokens.
// The parser is syntactic only; which fields a step type takes is validate_structure's job.
#include "schedule/formats/action_notation.hpp"
#include "schedule/validate.hpp"

#include "schedule/errors.hpp"

#include <cctype>
#include <limits>

namespace ppsched {
namespace {

const char* const kExpected = "expected <stage><ACTION><micro> such as 0F1 or 2RECV_B0";

std::string_view trim(std::string_view t) {
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  return t;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_token_char(char c) { return (c >= 'A' && c <= 'Z') || c == '_'; }

// Reads a run of digits at `pos`; kNone when there are none. False on int32 overflow.
bool read_number(std::string_view t, size_t& pos, int32_t& out) {
  out = kNone;
  if (pos >= t.size() || !is_digit(t[pos])) return true;
  int64_t v = 0;
  while (pos < t.size() && is_digit(t[pos])) {
    v = v * 10 + (t[pos] - '0');
    if (v > std::numeric_limits<int32_t>::max()) return false;
    ++pos;
  }
  out = static_cast<int32_t>(v);
  return true;
}

std::optional<Step> fail(std::string* error, std::string msg) {
  if (error) *error = std::move(msg);
  return std::nullopt;
}

std::string got(std::string_view text) { return ", got '" + clip(text) + "'"; }

std::optional<Step> parse_simple(std::string_view text, std::string* error) {
  size_t pos = 0;
  Step step;
  int32_t stage = kNone;
  if (!read_number(text, pos, stage) || stage >= kMaxStages)
    return fail(error, "stage number too large (at most " + std::to_string(kMaxStages) + " stages)" + got(text));
  step.stage = static_cast<int16_t>(stage);
  const size_t token_begin = pos;
  while (pos < text.size() && is_token_char(text[pos])) ++pos;
  const std::string_view token = text.substr(token_begin, pos - token_begin);
  if (token.empty()) return fail(error, kExpected + got(text));
  const auto op = op_from_torch_token(token);
  if (!op) return fail(error, "unknown action '" + clip(token) + "': " + kExpected + got(text));
  step.op = *op;
  if (!read_number(text, pos, step.micro)) return fail(error, "micro number too large" + got(text));
  if (pos != text.size())
    return fail(
        error, "unexpected '" + clip(text.substr(pos)) + "' after the action: " + kExpected + got(text));
  if (is_composite(step.op))
    return fail(error, std::string(op_name(step.op)) + " is a composite: expected (<a>;<b>)" +
                           std::string(op_name(step.op)) + got(text));
  return step;
}

std::optional<Step> parse_composite(std::string_view text, std::string* error) {
  const char* const shape = "expected (<a>;<b>)OVERLAP_F_B, (<a>;<b>)OVERLAP_B_F or (<a>[;...])BATCH_SEND_RECV";
  const size_t close = text.find(')');
  if (close == std::string_view::npos) return fail(error, "missing ')': " + std::string(shape) + got(text));
  const std::string_view inner = text.substr(1, close - 1);
  if (inner.find('(') != std::string_view::npos)
    return fail(error, "composites do not nest: " + std::string(shape) + got(text));
  const std::string_view token = text.substr(close + 1);
  const auto op = op_from_torch_token(token);
  if (!op || !is_composite(*op))
    return fail(error, "expected a composite action after ')', found '" + clip(token) + "': " + shape +
                           got(text));
  Step step;
  step.op = *op;
  size_t begin = 0;
  while (true) {
    const size_t end = inner.find(';', begin);
    const std::string_view part = trim(inner.substr(begin, end == std::string_view::npos ? end : end - begin));
    if (part.empty()) return fail(error, "empty sub-action: " + std::string(shape) + got(text));
    std::string sub_error;
    auto sub = parse_simple(part, &sub_error);
    if (!sub) return fail(error, "in sub-action '" + clip(part) + "': " + sub_error);
    step.edit_sub_steps().push_back(std::move(*sub));
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  return step;
}

}  // namespace

std::optional<Step> parse_action(std::string_view text, std::string* error) {
  const std::string_view t = trim(text);
  if (t.empty()) return fail(error, std::string(kExpected) + ", got an empty action");
  if (t.front() == '(') return parse_composite(t, error);
  return parse_simple(t, error);
}

std::string format_action(const Step& step) {
  const auto& row = info(step.op);
  const std::string token(row.torch_token.empty() ? row.name : row.torch_token);
  if (is_composite(step.op)) {
    std::string out = "(";
    for (size_t k = 0; k < step.sub_steps().size(); ++k) {
      if (k) out += ';';
      out += format_action(step.sub_steps()[k]);
    }
    return out + ")" + token;
  }
  std::string out;
  if (step.stage >= 0) out += std::to_string(step.stage);
  out += token;
  if (step.micro >= 0) out += std::to_string(step.micro);
  return out;
}

}  // namespace ppsched
