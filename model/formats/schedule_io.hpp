// Reading and writing schedule files by format (told apart by extension or explicitly).
#pragma once

#include <string>

#include "model/formats/pytorch_csv.hpp"
#include "model/schedule.hpp"

namespace ppsched {

enum class FileFormat { Json, Csv };

// ".json" -> Json, ".csv" -> Csv; throws InputError otherwise.
FileFormat format_from_path(const std::string& path);
FileFormat format_from_name(const std::string& name);  // "json" | "csv"

// Reads a file (throws InputError with the file name on any problem, unreadable file too).
Schedule read_schedule_file(const std::string& path, std::optional<FileFormat> format = {},
                            const CsvReadOptions& csv = {});
std::string write_schedule(const Schedule& s, FileFormat format, CsvKind csv_kind = CsvKind::ComputeComms);

}  // namespace ppsched
