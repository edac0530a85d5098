// Built by package_install_and_use with nothing but `pkg-config --cflags --libs tessel`: the
// product of two tensors through libtessel, checked against the arithmetic.
#include <tessel/ops/ops.h>

#include <cstdio>

int main() {
  using tessel::Tensor;
  Tensor a = Tensor::full({1}, 2.0, tessel::DType::kF32).value();
  Tensor b = Tensor::full({1}, 3.0, tessel::DType::kF32).value();
  float product = tessel::ops::mul(a, b).value().to_vector<float>().value().at(0);
  std::printf("2 x 3 = %g\n", double(product));
  return product == 6.0f ? 0 : 1;
}
