// Sparse matrices in COO, CSR and BSR (blocked CSR), on any device, with conversions to and from
// dense and between formats. Indices are validated when a matrix is built, so kernels
// (kernels/sparse.tile) trust them.
//
//   TESSEL_ASSIGN_OR_RETURN(SparseMatrix a, SparseMatrix::coo(3, 4, {0, 2, 2}, {1, 0, 3},
//                                                             {1.f, 2.f, 3.f}, device));
//   TESSEL_ASSIGN_OR_RETURN(SparseMatrix c, a.to(SparseFormat::kCsr));
//   TESSEL_ASSIGN_OR_RETURN(Tensor d, c.to_dense());
//
// Letters: M x K the matrix, NNZ stored values. Layouts (index tensors are i64, on the matrix's
// device):
//   COO  row_indices [NNZ], col_indices [NNZ], values [NNZ], sorted by (row, column), no
//        duplicates (coalesced, as torch.sparse_coo_tensor(...).coalesce()).
//   CSR  indptr [M + 1], col_indices [NNZ] (increasing within a row), values [NNZ].
//   BSR  BR x BC blocks: indptr [ceil(M / BR) + 1], col_indices [NB] (block columns, increasing
//        within a block row), values [NB, BR, BC]; blocks at the ragged edge are padded with 0.
// Validation (each a Status naming the position): an index outside the matrix, CSR indptr that
// does not start at 0, decreases or does not end at NNZ, columns not increasing within a CSR row.
// COO input may come in any order; duplicates are an error (Duplicates::kError) or are added up
// (Duplicates::kSum, what coalesce() does).
//
// The structure (indices) is kept on the host too: building, converting and planning
// (sparse/planner.h) read it there; only values and index tensors live on the device, and a
// conversion permutes values on the device (kernel gather_values). Derived index arrays that
// kernels of another format or a backward pass need (CSR's expanded row indices, the transpose's
// CSR) are computed once per matrix and shared by its copies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel::sparse {

enum class SparseFormat { kCoo, kCsr, kBsr };
const char* format_name(SparseFormat f);  // "coo", "csr", "bsr"
Expected<SparseFormat> parse_format(const std::string& name);

enum class Duplicates { kError, kSum };

// What the planner and conversions read: the pattern on the host, in CSR form.
struct HostPattern {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> indptr;       // [rows + 1]
  std::vector<int64_t> col_indices;  // [nnz], increasing within a row
  int64_t nnz() const { return static_cast<int64_t>(col_indices.size()); }
};

// Index arrays a matrix's kernels need besides its own layout, made on first use.
struct DerivedIndices;
struct BlockLayout;

class SparseMatrix {
 public:
  SparseMatrix() = default;

  // From host arrays (values as f32); validated as the header says.
  static Expected<SparseMatrix> coo(int64_t rows, int64_t cols, std::vector<int64_t> row_indices,
                                    std::vector<int64_t> col_indices, std::vector<float> values,
                                    Device* device = cpu_device(),
                                    Duplicates duplicates = Duplicates::kError);
  static Expected<SparseMatrix> csr(int64_t rows, int64_t cols, std::vector<int64_t> indptr,
                                    std::vector<int64_t> col_indices, std::vector<float> values,
                                    Device* device = cpu_device());
  // The nonzeros of a 2-d f32 tensor (|x| > threshold) on its device, in `format`.
  static Expected<SparseMatrix> from_dense(const Tensor& dense, SparseFormat format,
                                           double threshold = 0.0, int64_t block_rows = 16,
                                           int64_t block_cols = 16);
  // A pattern with values already on `values`' device (NNZ of them, f32, in CSR order).
  static Expected<SparseMatrix> from_pattern(std::shared_ptr<const HostPattern> pattern,
                                             Tensor values);

  bool defined() const { return pattern_ != nullptr; }
  SparseFormat format() const { return format_; }
  int64_t rows() const { return pattern_->rows; }
  int64_t cols() const { return pattern_->cols; }
  int64_t nnz() const { return pattern_->nnz(); }
  // Stored values: NNZ for COO/CSR, NB x BR x BC for BSR (zeros of the blocks included).
  int64_t stored() const { return values_.numel(); }
  double density() const;
  Device* device() const { return values_.device(); }
  int64_t block_rows() const { return block_rows_; }
  int64_t block_cols() const { return block_cols_; }

  const Tensor& values() const { return values_; }
  const Tensor& indptr() const { return indptr_; }            // CSR, BSR
  const Tensor& row_indices() const { return row_indices_; }  // COO
  const Tensor& col_indices() const { return col_indices_; }  // all
  const std::shared_ptr<const HostPattern>& pattern() const { return pattern_; }

  // The same matrix with other values (same count, dtype f32, on this matrix's device): what a
  // training step produces. Derived indices are shared.
  Expected<SparseMatrix> with_values(Tensor values) const;

  // Conversions. Values are permuted on the device; BSR pads blocks with zeros.
  Expected<SparseMatrix> to(SparseFormat format, int64_t block_rows = 16,
                            int64_t block_cols = 16) const;
  Expected<Tensor> to_dense() const;
  // The transpose [K, M] in the same format (COO: the same order of values is not kept; values
  // are permuted on the device).
  Expected<SparseMatrix> transpose() const;
  // Another device; indices and values copied.
  Expected<SparseMatrix> to_device(Device* device) const;

  // ---- Derived index tensors (on this matrix's device, made once) ----
  // COO row index of every stored value in CSR order (CSR's rows expanded; COO's own).
  Expected<Tensor> expanded_rows() const;
  // The transpose's CSR: indptr [K + 1], its column indices (original rows) and the position in
  // this matrix's values of each of its values.
  struct Transposed {
    Tensor indptr, col_indices, permutation;
    Tensor inverse;  // the position in the transpose's values of each of this matrix's values
    std::shared_ptr<const HostPattern> pattern;
  };
  Expected<Transposed> transposed() const;

  std::string describe() const;  // "csr 4096 x 4096, 838861 nnz (5.00%) on cpu"

 private:
  // The BSR layout of this pattern for br x bc blocks, made once.
  Expected<const BlockLayout*> blocks(int64_t block_rows, int64_t block_cols) const;

  SparseFormat format_ = SparseFormat::kCsr;
  std::shared_ptr<const HostPattern> pattern_;
  Tensor values_, indptr_, row_indices_, col_indices_;
  int64_t block_rows_ = 1, block_cols_ = 1;
  std::shared_ptr<DerivedIndices> derived_;
};

// The host-side checks, exposed for tests: a CSR pattern (indptr, columns) of a rows x cols
// matrix. The message names the row, position and values involved.
Status validate_csr(int64_t rows, int64_t cols, const std::vector<int64_t>& indptr,
                    const std::vector<int64_t>& col_indices, int64_t values);

}  // namespace tessel::sparse
