#include "app/floors.h"

#include "app/report.h"

namespace fusedlinear {

ForwardFloors ForwardFloors::time(const torch::Device& device, int warmup, int iters,
                                  LayeredModelImpl& model,
                                  const std::function<const torch::Tensor&(int)>& input,
                                  int64_t rows) {
  const std::vector<TimingStats> times =
      time_interleaved(device, warmup, iters,
                       {[&model, &input](int i) { model.run_gemms(input(i)); },
                        [&model](int) {
                          for (LinearChainImpl* linear : model.linears())
                            linear->linear()->weight.clone();
                        }});
  ForwardFloors floors;
  floors.gemms = times.at(0);
  floors.weight_copy = times.at(1);
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
