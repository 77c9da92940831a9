// Reading and writing schedule files by format (told apart by extension or explicitly).
#pragma once

#include <cstdint>
#include <string>

#include "schedule/formats/pytorch_csv.hpp"
#include "schedule/schedule.hpp"

namespace ppsched {

enum class FileFormat { Json, Csv };

// ".json" -> Json, ".csv" -> Csv; throws InputError otherwise.
FileFormat format_from_path(const std::string& path);
FileFormat format_from_name(const std::string& name);  // "json" | "csv"

// Input files (schedules, cost files, traces) are at most this large (README "Limits").
inline constexpr uint64_t kMaxInputBytes = uint64_t{1} << 30;
// Cost files are read into a document (they are small); their limit is lower.
inline constexpr uint64_t kMaxCostFileBytes = uint64_t{64} << 20;

// The bytes of an input file. Refuses, before reading, what is not a regular file (devices,
// FIFOs, directories) and a file over max_bytes; throws InputError naming the file.
std::string read_input_file(const std::string& path, uint64_t max_bytes = kMaxInputBytes);

// Reads a file (throws InputError with the file name on any problem, unreadable file too).
// `csv_kind`, when given, is set for a CSV file to the kind it was (left alone for JSON).
// A file without any P2P step, JSON or CSV, gets them by one rule (insert_p2p_if_compute_only:
// the column scan); `inserted_p2p`, when given, is set to how many it inserted (0: none, the
// file taken as written).
Schedule read_schedule_file(const std::string& path, std::optional<FileFormat> format = {},
                            const CsvReadOptions& csv = {}, std::optional<CsvKind>* csv_kind = nullptr,
                            int64_t* inserted_p2p = nullptr);

// The runtime mode a schedule file selects by default: a compute_comms CSV is PyTorch's lowered
// schedule, whose receives PyTorch's _PipelineScheduleRuntime posts at their RECV action and
// waits just before the compute that consumes them (sends waited at the end): ppsched's
// --overlap-p2p. Every other file (JSON, a compute_only CSV, whose P2P steps ppsched places)
// runs blocking unless told. README "PyTorch pipelining CSV" says why.
inline bool selects_overlap_p2p(const std::optional<CsvKind>& csv_kind) {
  return csv_kind && *csv_kind == CsvKind::ComputeComms;
}
std::string write_schedule(const Schedule& s, FileFormat format, CsvKind csv_kind = CsvKind::ComputeComms);

}  // namespace ppsched
