// A model of this project's own, declared once: Linear(512 -> 256) -> GELU(tanh) -> x * scale (a
// per-feature parameter) -> squared ReLU (a functor of our own) -> clamp(-2, 2).
#pragma once

#include <fusedlinear/model.h>

namespace example {
namespace act = fusedlinear::act;

// relu(x)^2 (Primer's activation): not in fusedlinear's vocabulary, so written here as its
// functors are (kernels/math/functors.h): the value, the float64 form, the eager libtorch form.
struct SquaredRelu {
  static constexpr const char* kName = "squared_relu";
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    const V r = act::if_negative(x, V(0.0f), x);
    return r * r;
  }
  static double reference(double x) { return x < 0 ? 0.0 : x * x; }
  template <class T>
  static T eager(const T& x) {
    return relu(x).square();
  }
};

struct MyModel {
  static constexpr const char* kName = "my_model";
  static constexpr const char* kLinear = "fc";
  static constexpr auto kChain =
      act::Chain(act::GeluTanh{}, act::MulParam{"scale"}, SquaredRelu{}, act::Clamp{-2.0f, 2.0f});
};

}  // namespace example
