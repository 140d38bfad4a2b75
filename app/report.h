// Plain-text tables for the terminal (columns aligned, numbers right-aligned) and small
// formatting helpers shared by the commands.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "app/timing.h"

namespace fusedlinear {

class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void add_row(std::vector<std::string> row);
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// A timing as JSON: median_us, p10_us, p90_us, min_us, samples.
nlohmann::ordered_json timing_json(const TimingStats& t);

// printf-style "%.*g" / "%.*f" / "%.*e" helpers returning std::string.
std::string fixed(double value, int decimals);
std::string scientific(double value, int decimals);

// Output files (--output, --json, ...): an existing file is replaced only with --overwrite, and
// never when it is one of the run's inputs. Throws UsageError naming the path otherwise.
void check_output_path(const std::string& path, bool overwrite,
                       const std::vector<std::string>& inputs);

// Writes `text` to `path` through a temporary file and a rename, so a failed write leaves
// whatever was there intact. Call check_output_path first. Throws UsageError on failure.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace fusedlinear
