#include "exec/error_file.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <mutex>

#include <nlohmann/json.hpp>

namespace ppsched::exec {
namespace {

std::mutex g_mutex;
std::vector<std::string> g_lines;  // guarded by g_mutex
std::atomic<bool> g_reported{false};
std::atomic<bool> g_verbose{false};
std::string g_who = "ppsched-exec";
std::string (*g_describe)(const std::exception&) = nullptr;

constexpr size_t kMaxLines = 200;  // a long refusal list must not grow the file without bound

// Tees std::cerr: forwards everything, keeps each completed line. Unbuffered, so every write
// reaches stderr at once, as std::cerr's own buffer does; locked, because a replaced rdbuf is
// no longer synchronised with stdio for writers on other threads.
class TeeBuf : public std::streambuf {
 public:
  explicit TeeBuf(std::streambuf* out) : out_(out) {}

 protected:
  int_type overflow(int_type c) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (traits_type::eq_int_type(c, traits_type::eof())) return out_->pubsync() == 0 ? traits_type::not_eof(c) : c;
    take(traits_type::to_char_type(c));
    return out_->sputc(traits_type::to_char_type(c));
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::streamsize k = 0; k < n; ++k) take(s[k]);
    return out_->sputn(s, n);
  }
  int sync() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return out_->pubsync();
  }

 private:
  void take(char c) {
    if (c != '\n') {
      if (line_.size() < 4096) line_ += c;
      return;
    }
    note_error_line(line_);
    line_.clear();
  }
  std::mutex mutex_;
  std::streambuf* out_;
  std::string line_;
};

void terminate_handler() {
  std::string what = "an exception of unknown type";
  if (auto p = std::current_exception()) {
    try {
      std::rethrow_exception(p);
    } catch (const std::exception& e) {
      what = g_describe ? g_describe(e) : e.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate was called without an exception";
  }
  const std::string line = "error: " + g_who + ": unexpected failure: " + what;
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  note_error_line(line);
  report_failure_to_launcher(1);
  std::_Exit(1);
}

}  // namespace

std::string torchelastic_error_json(const std::string& message, const std::string& traceback, long long unix_seconds) {
  // torchrun reads the timestamp with int(...) of a string, as its own ErrorHandler writes it.
  // Written by nlohmann: every string escaped, invalid UTF-8 replaced (a message may quote input).
  const nlohmann::json j = {
      {"message",
       {{"message", message}, {"extraInfo", {{"py_callstack", traceback}, {"timestamp", std::to_string(unix_seconds)}}}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

FailureReport failure_report(const std::vector<std::string>& stderr_lines, int status) {
  std::vector<std::string> errors;
  for (const auto& l : stderr_lines)
    if (l.rfind("error: ", 0) == 0) errors.push_back(l.substr(7));
  if (errors.empty()) {
    // No "error:" line (CLI11 prints its own usage errors): the last lines it printed.
    size_t from = stderr_lines.size() > 5 ? stderr_lines.size() - 5 : 0;
    for (size_t k = from; k < stderr_lines.size(); ++k)
      if (!stderr_lines[k].empty()) errors.push_back(stderr_lines[k]);
  }
  FailureReport r;
  for (size_t k = 0; k < errors.size(); ++k) r.message += (k ? "\n" : "") + errors[k];
  if (r.message.empty()) r.message = "ppsched-exec failed without printing an error";
  const char* meaning = status == 2 ? "refused before any communication" : "the run failed";
  r.traceback = r.message + "\nppsched-exec exited with status " + std::to_string(status) + " (" + meaning + ")";
  return r;
}

void note_error_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_lines.size() >= kMaxLines) g_lines.erase(g_lines.begin() + kMaxLines / 2);  // keep the first and the latest
  g_lines.push_back(line);
}

void report_failure_to_launcher(int status) {
  if (status == 0 || g_reported.exchange(true)) return;
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return;
  try {
    std::vector<std::string> lines;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      lines = g_lines;
    }
    FailureReport r = failure_report(lines, status);
    const std::string json = torchelastic_error_json(r.message, r.traceback, static_cast<long long>(std::time(nullptr)));
    if (FILE* f = std::fopen(path, "w")) {
      std::fwrite(json.data(), 1, json.size(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "warning: cannot write TORCHELASTIC_ERROR_FILE '%s'\n", path);
    }
  } catch (...) {
  }
}

StderrRecorder::StderrRecorder() : original_(std::cerr.rdbuf()), tee_(std::make_unique<TeeBuf>(original_)) {
  std::cerr.rdbuf(tee_.get());
}

StderrRecorder::~StderrRecorder() {
  std::cerr.flush();
  std::cerr.rdbuf(original_);
}

void set_verbose_errors(bool verbose) { g_verbose = verbose; }
bool verbose_errors() { return g_verbose; }

void install_terminate_handler(std::string who, std::string (*describe)(const std::exception&)) {
  g_who = std::move(who);
  g_describe = describe;
  std::set_terminate(terminate_handler);
}

}  // namespace ppsched::exec
