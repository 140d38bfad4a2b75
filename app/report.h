// Plain-text tables for the terminal (columns aligned, numbers right-aligned) and small
// formatting helpers shared by the commands.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "app/timing.h"
#include "modules/output_file.h"

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

}  // namespace fusedlinear
