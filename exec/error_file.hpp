// What a failing rank tells its launcher, in the launcher's language.
//
// torchrun (torch/distributed/elastic/multiprocessing/errors, 1.13 and 2.x) gives every worker
// TORCHELASTIC_ERROR_FILE. When a worker exits non-zero, the agent reads that file as
//   {"message": {"message": M, "extraInfo": {"py_callstack": T, "timestamp": "<unix seconds>"}}}
// (the dict form; errorCode is added by the agent), takes the failure with the smallest
// timestamp as the root cause, and prints T under "traceback" (M when T is absent). With no
// file its summary says "error_file: <N/A>" and points at a documentation page instead.
//
// The report is what the rank said: every line it printed on std::cerr while a
// StderrRecorder was installed, plus the lines given to note_error_line() (the watchdog
// prints with stdio from its own thread). "error: " lines are the message; a rank that
// printed none (a CLI11 usage error) reports its last stderr lines.
#pragma once

#include <exception>
#include <memory>
#include <streambuf>
#include <string>
#include <vector>

namespace ppsched::exec {

// torchrun's error-file JSON for one failure.
std::string torchelastic_error_json(const std::string& message, const std::string& traceback, long long unix_seconds);

// The report built from the lines recorded so far (message, traceback), for exit status `status`.
struct FailureReport {
  std::string message;
  std::string traceback;
};
FailureReport failure_report(const std::vector<std::string>& stderr_lines, int status);

void note_error_line(const std::string& line);  // one line as printed, "error: ..." included

// When `status` is non-zero and TORCHELASTIC_ERROR_FILE is set: writes the report there.
// At most once per process (the first failing exit path wins). Never throws.
void report_failure_to_launcher(int status);

// Copies every line written to std::cerr into the report while it lives.
class StderrRecorder {
 public:
  StderrRecorder();
  ~StderrRecorder();
  StderrRecorder(const StderrRecorder&) = delete;
  StderrRecorder& operator=(const StderrRecorder&) = delete;

 private:
  std::streambuf* original_;
  std::unique_ptr<std::streambuf> tee_;
};

// --verbose: c10 errors keep their C++ backtrace (c10::Error::what() instead of
// what_without_backtrace()).
void set_verbose_errors(bool verbose);
bool verbose_errors();

// The last resort for an exception nobody caught, in any thread: print it as "error: WHO:
// unexpected failure: ..." (through `describe`, which knows c10::Error), report it to the
// launcher, and exit 1 instead of std::terminate's "terminate called ..." and SIGABRT.
void install_terminate_handler(std::string who, std::string (*describe)(const std::exception&));

}  // namespace ppsched::exec
