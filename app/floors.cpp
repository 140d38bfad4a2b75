#include "app/floors.h"

#include "app/report.h"

namespace fusedlinear {

std::vector<std::function<void(int)>> ForwardFloors::calls(
    LayeredModelImpl& model, const std::function<const torch::Tensor&(int)>& input) {
  return {[&model, input](int i) { model.run_gemms(input(i)); },
          [&model](int) {
            for (LinearChainImpl* linear : model.linears()) linear->linear()->weight.clone();
          }};
}

ForwardFloors ForwardFloors::from(const std::vector<TimingStats>& times, size_t first,
                                  LayeredModelImpl& model, int64_t rows) {
  ForwardFloors floors;
  floors.gemms = times.at(first);
  floors.weight_copy = times.at(first + 1);
  floors.gemm_flops = double(rows) * model.flops_per_row();
  return floors;
}

nlohmann::ordered_json ForwardFloors::json() const {
  return {{"gemm_addmm", timing_json(gemms)},
          {"gemm_gflops", gemm_gflops()},
          {"weight_copy", timing_json(weight_copy)},
          {"weight_read_us", weight_read_us()}};
}

}  // namespace fusedlinear
