#include "schedule/formats/json_support.hpp"

#include <algorithm>

#include "schedule/errors.hpp"

namespace ppsched {
namespace {

using json = nlohmann::json;

// Builds nlohmann's DOM from SAX events, like json::parse does, but refuses duplicate keys
// (which json::parse silently collapses) and turns syntax errors into located InputErrors.
// (nlohmann's parser-callback route would do the same but is quadratic on long arrays of
// objects in 3.11.)
class DomBuilder : public nlohmann::json_sax<json> {
 public:
  DomBuilder(std::string_view text, const std::string& file, bool step_locations, json& root)
      : text_(text), file_(file), step_locations_(step_locations), root_(root) {}

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override { return put(std::move(v)); }
  bool binary(binary_t& v) override { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::value_t::object); }
  bool start_array(std::size_t) override { return open(json::value_t::array); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    Open& o = stack_.back();
    if (o.value->contains(k)) duplicate(k);
    o.key = k;
    member_ = &(*o.value)[k];
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    throw_json_syntax_error(text_, file_, position, ex);
  }

 private:
  struct Open {
    json* value;
    std::string key;  // objects: the key being read
  };

  // Places a value in the innermost open container (or as the root); returns where it went.
  json* place(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json* parent = stack_.back().value;
    if (parent->is_array()) {
      parent->get_ref<json::array_t&>().push_back(std::move(v));
      return &parent->get_ref<json::array_t&>().back();
    }
    *member_ = std::move(v);
    return member_;
  }
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  // A container's address stays valid while it is open: nothing is added to its parent
  // until it is closed.
  bool open(json::value_t type) {
    stack_.push_back({place(json(type)), {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  [[noreturn]] void duplicate(const std::string& k) const {
    std::string path;
    for (size_t d = 0; d + 1 < stack_.size(); ++d) {
      const Open& o = stack_[d];
      if (o.value->is_array()) {
        path += "[" + std::to_string(o.value->size() - 1) + "]";
      } else {
        path += (path.empty() ? "" : ".") + o.key;
      }
    }
    Location loc;
    loc.file = file_;
    if (step_locations_ && stack_.size() >= 4 && stack_[0].key == "programs" && stack_[1].value->is_array() &&
        stack_[2].value->is_array()) {
      loc.rank = static_cast<int>(stack_[1].value->size()) - 1;
      loc.index = static_cast<int>(stack_[2].value->size()) - 1;
    }
    loc.field = path.empty() ? k : path + "." + k;
    throw InputError(
        loc, "duplicate key '" + k + "'" + (path.empty() ? "" : " in " + path) + ": each key may appear once");
  }

  std::string_view text_;
  const std::string& file_;
  bool step_locations_;
  json& root_;
  std::vector<Open> stack_;
  json* member_ = nullptr;
};

}  // namespace

void throw_json_syntax_error(std::string_view text, const std::string& file, std::size_t position,
                             const nlohmann::detail::exception& ex) {
  // "[json.exception.parse_error.101] parse error at line 5, column 9: syntax error ..." or
  // "[json.exception.out_of_range.406] number overflow parsing '1E432'": the tag and nlohmann's
  // own position (in another convention) go.
  std::string_view what = ex.what();
  if (!what.empty() && what.front() == '[') {
    const size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  if (what.substr(0, 12) == "parse error ") {
    const size_t colon = what.find(": ");
    if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
  }
  throw_json_syntax_error(text, file, position, what);
}

void throw_json_syntax_error(std::string_view text, const std::string& file, std::size_t position,
                             std::string_view what) {
  // Line and column from the byte offset (1-based index of the last character read).
  const size_t at = std::min(position > 0 ? position - 1 : 0, text.size());
  const size_t line_start = at == 0 ? std::string_view::npos : text.rfind('\n', at - 1);
  Location loc;
  loc.file = file;
  loc.line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  const size_t column = line_start == std::string_view::npos ? at + 1 : at - line_start;
  throw InputError(loc, "malformed JSON at column " + std::to_string(column) + ": " + clip(what, 300));
}

json parse_json_strict(std::string_view text, const std::string& file, bool step_locations) {
  json root;
  DomBuilder builder(text, file, step_locations, root);
  json::sax_parse(text.begin(), text.end(), &builder);
  return root;
}

}  // namespace ppsched
