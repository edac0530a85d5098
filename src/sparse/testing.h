// Helpers the sparse tests share: the devices to test on and seeded random operands.
#pragma once

#include <random>
#include <vector>

#include "ops/kernel_cache.h"
#include "runtime/tensor.h"
#include "sparse/sparse_matrix.h"

namespace tessel::sparse::testing {

// Every available device the op library launches on.
inline std::vector<Device*> devices() {
  std::vector<Device*> list;
  for (Device* d : available_devices())
    if (ops::launches_on(d->kind())) list.push_back(d);
  return list;
}

// Each cell nonzero with probability `density`, values in [-1, 1).
inline SparseMatrix random_matrix(int64_t rows, int64_t cols, double density, uint32_t seed,
                                  Device* device) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1), v(-1, 1);
  std::vector<int64_t> r, c;
  std::vector<float> values;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (u(rng) < density) {
        r.push_back(i);
        c.push_back(j);
        values.push_back(v(rng));
      }
  return SparseMatrix::coo(rows, cols, r, c, values, device).value();
}

inline Tensor random_dense(const Shape& shape, uint32_t seed, Device* device) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> v(-1, 1);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& x : values)
    x = v(rng);
  return Tensor::from_vector(values, shape, device).value();
}

}  // namespace tessel::sparse::testing
