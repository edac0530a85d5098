// The sparse operators, as OpDefs (ops/op.h) over the index and value tensors of a SparseMatrix
// (sparse/sparse_matrix.h), so autograd::apply records them like any op. They live in their own
// table, not in ops::all_ops(): their index inputs are not random tensors the generic op test can
// make, and sparse_ops_test.cpp checks each on every device instead (forward against the
// reference, gradients against finite differences).
//
//   op                inputs                                              output
//   spmm_csr          indptr, cols, values, B [K, N], rows, T.indptr,     [M, N] = S B
//                     T.cols, T.permutation
//   spmm_coo          rows, cols, values, B  (attr rows = M)              [M, N]
//   spmm_bsr          indptr, block cols, values [NB, BR, BC], B (rows)   [M, N] (no backward)
//   spmv_csr          as spmm_csr with x [K]                              [M]
//   spmv_coo          rows, cols, values, x  (attr rows)                  [M]
//   sparse_add_dense  rows, cols, values, D [M, K]                        D + S
//   sparse_to_dense   rows, cols, values  (attrs rows, cols)              S as [M, K]
//   gather_values     values, permutation, inverse permutation            values[permutation]
//
// "rows" is the row of each stored value (CSR's rows expanded) and T the transpose's CSR
// (SparseMatrix::transposed()): the backward passes need them. Gradients: values get
// SDDMM(dC, B) (kernel sddmm) and B gets S^T dC; D gets dC and values the dense gradient at the
// pattern (gather_pairs).
#pragma once

#include <string_view>
#include <vector>

#include "ops/kernel_cache.h"
#include "ops/op.h"

namespace tessel::sparse {

const std::vector<ops::OpDef>& sparse_ops();
Expected<const ops::OpDef*> find_sparse_op(std::string_view name);

// The column tile of spmm_csr_tiled for n dense columns on `device` (a divisor of n: 256, 128
// or 64, or n itself up to 256 on the CPU), or 0 where it does not apply (spmm_csr then).
int64_t csr_tile(Device* device, int64_t n);

// Groups of kSpmvRows rows (spmv_csr's BM) per block of spmv_csr for a product of `rows` rows and
// `nnz` nonzeros on `device`. On the CPU a block gets at least kSpmvBlockNonzeros nonzeros (about
// 100 us at ~0.8 ns a nonzero), and a smaller product is one block, which the pool runs on the
// calling thread: a parallel launch costs ~100 us of CPU time besides the work (the workers spin
// for that long after each job before they sleep), which a product below ~0.5 ms does not win
// back. Elsewhere 1 (a row per thread).
constexpr int64_t kSpmvRows = 64;
constexpr int64_t kSpmvBlockNonzeros = int64_t{1} << 17;
int64_t spmv_groups(Device* device, int64_t rows, int64_t nnz);
// The blocks spmv_csr runs in on the CPU (what the planner reckons with).
int64_t spmv_cpu_blocks(int64_t rows, int64_t nnz);

// Rows per block of spmm_csr_tiled: enough to amortise a block's set-up, few enough that the
// thread pool's chunks balance rows of unequal length.
constexpr int64_t kCsrBlockRows = 8;

// Column tile of spmm_csr for n dense columns on the CPU (64, 128 or 256): a narrower operand
// does not pay for a 256-wide accumulator.
ops::KernelParams spmm_params(Device* device, int64_t n);

}  // namespace tessel::sparse
