// Sparse matrices: building and validating patterns on the host, conversions (see
// sparse_matrix.h).
#include "sparse/sparse_matrix.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <mutex>
#include <numeric>

#include "ops/kernel_cache.h"

namespace tessel::sparse {

const char* format_name(SparseFormat f) {
  switch (f) {
    case SparseFormat::kCoo:
      return "coo";
    case SparseFormat::kCsr:
      return "csr";
    case SparseFormat::kBsr:
      return "bsr";
  }
  return "?";
}

Expected<SparseFormat> parse_format(const std::string& name) {
  for (SparseFormat f : {SparseFormat::kCoo, SparseFormat::kCsr, SparseFormat::kBsr})
    if (name == format_name(f)) return f;
  return invalid_argument("unknown sparse format '{}': expected coo, csr or bsr", name);
}

// A BSR layout made from a pattern: the block pattern and each value's place in the blocks.
struct BlockLayout {
  int64_t block_rows, block_cols, count;
  Tensor indptr, col_indices, positions;
};

struct DerivedIndices {
  std::mutex mutex;
  Tensor indptr;  // CSR's, kept when the matrix is in another format
  Tensor expanded_rows;
  std::list<BlockLayout> blocks;  // std::list: pointers to its elements stay valid
  bool have_transposed = false;
  SparseMatrix::Transposed transposed;
};

namespace {

Expected<Tensor> index_tensor(const std::vector<int64_t>& v, Device* device) {
  return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}, device);
}

Status check_shape(int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    return invalid_argument("sparse matrix: negative shape {} x {}", rows, cols);
  return ok_status();
}

// The rows of a CSR pattern, one per stored value.
std::vector<int64_t> expand_rows(const HostPattern& p) {
  std::vector<int64_t> rows(static_cast<size_t>(p.nnz()));
  for (int64_t r = 0; r < p.rows; ++r)
    std::fill(rows.begin() + p.indptr[r], rows.begin() + p.indptr[r + 1], r);
  return rows;
}

// The transpose's CSR pattern and, for each of its values, the position of the same value in p.
HostPattern transpose_pattern(const HostPattern& p, std::vector<int64_t>* permutation) {
  HostPattern t;
  t.rows = p.cols;
  t.cols = p.rows;
  t.indptr.assign(static_cast<size_t>(p.cols + 1), 0);
  for (int64_t c : p.col_indices)
    t.indptr[c + 1] += 1;
  std::partial_sum(t.indptr.begin(), t.indptr.end(), t.indptr.begin());
  t.col_indices.resize(p.col_indices.size());
  permutation->resize(p.col_indices.size());
  std::vector<int64_t> next(t.indptr.begin(), t.indptr.end() - 1);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t k = p.indptr[r]; k < p.indptr[r + 1]; ++k) {
      int64_t at = next[p.col_indices[k]]++;
      t.col_indices[at] = r;
      (*permutation)[at] = k;
    }
  return t;
}

// out[k] = src[idx[k]] on src's device.
Expected<Tensor> gather(const Tensor& src, const Tensor& idx) {
  TESSEL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(idx.shape(), src.dtype(), src.device()));
  if (out.numel() == 0) return out;
  TESSEL_TRY(ops::launch_kernel("gather_values", {}, {src, idx, out}));
  return out;
}

// For a BSR layout of p with br x bc blocks: the block pattern and, for each value of p (CSR
// order), its position in the flat block values.
HostPattern block_pattern(const HostPattern& p, int64_t br, int64_t bc,
                          std::vector<int64_t>* positions) {
  HostPattern b;
  b.rows = (p.rows + br - 1) / br;
  b.cols = (p.cols + bc - 1) / bc;
  b.indptr.push_back(0);
  positions->resize(static_cast<size_t>(p.nnz()));
  std::vector<int64_t> slot(static_cast<size_t>(b.cols), -1);
  for (int64_t block_row = 0; block_row < b.rows; ++block_row) {
    int64_t first = b.indptr.back();
    int64_t r_end = std::min(p.rows, (block_row + 1) * br);
    std::vector<int64_t> present;
    for (int64_t r = block_row * br; r < r_end; ++r)
      for (int64_t k = p.indptr[r]; k < p.indptr[r + 1]; ++k) {
        int64_t bcol = p.col_indices[k] / bc;
        if (slot[bcol] < 0) {
          slot[bcol] = 0;
          present.push_back(bcol);
        }
      }
    std::sort(present.begin(), present.end());
    for (size_t i = 0; i < present.size(); ++i) {
      slot[present[i]] = first + static_cast<int64_t>(i);
      b.col_indices.push_back(present[i]);
    }
    for (int64_t r = block_row * br; r < r_end; ++r)
      for (int64_t k = p.indptr[r]; k < p.indptr[r + 1]; ++k) {
        int64_t c = p.col_indices[k];
        (*positions)[k] = (slot[c / bc] * br + (r - block_row * br)) * bc + c % bc;
      }
    for (int64_t bcol : present)
      slot[bcol] = -1;
    b.indptr.push_back(static_cast<int64_t>(b.col_indices.size()));
  }
  return b;
}

}  // namespace

Status validate_csr(int64_t rows, int64_t cols, const std::vector<int64_t>& indptr,
                    const std::vector<int64_t>& col_indices, int64_t values) {
  TESSEL_TRY(check_shape(rows, cols));
  if (static_cast<int64_t>(indptr.size()) != rows + 1)
    return invalid_argument("csr: indptr has {} entries, a matrix of {} rows needs {}",
                            indptr.size(), rows, rows + 1);
  const int64_t nnz = static_cast<int64_t>(col_indices.size());
  if (values != nnz)
    return invalid_argument("csr: {} values for {} column indices", values, nnz);
  if (indptr[0] != 0) return invalid_argument("csr: indptr[0] is {}, must be 0", indptr[0]);
  for (int64_t r = 0; r < rows; ++r)
    if (indptr[r + 1] < indptr[r])
      return invalid_argument("csr: indptr decreases at row {} ({} then {})", r, indptr[r],
                              indptr[r + 1]);
  if (indptr[rows] != nnz)
    return invalid_argument("csr: indptr ends at {} but there are {} column indices", indptr[rows],
                            nnz);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = indptr[r]; k < indptr[r + 1]; ++k) {
      int64_t c = col_indices[k];
      if (c < 0 || c >= cols)
        return out_of_range("csr: column index {} at position {} (row {}) is outside [0, {})", c,
                            k, r, cols);
      if (k > indptr[r] && c <= col_indices[k - 1])
        return invalid_argument(
            "csr: row {} has column {} after column {} at position {}: columns must increase "
            "within a row ({})",
            r, c, col_indices[k - 1], k, c == col_indices[k - 1] ? "duplicate" : "unsorted");
    }
  return ok_status();
}

Expected<SparseMatrix> SparseMatrix::from_pattern(std::shared_ptr<const HostPattern> pattern,
                                                  Tensor values) {
  if (values.dtype() != DType::kF32 || values.rank() != 1 || values.numel() != pattern->nnz())
    return invalid_argument("sparse matrix: values must be f32 [{}], got {} {}", pattern->nnz(),
                            dtype_name(values.dtype()), shape_string(values.shape()));
  SparseMatrix m;
  m.format_ = SparseFormat::kCsr;
  m.pattern_ = std::move(pattern);
  TESSEL_ASSIGN_OR_RETURN(m.values_, values.contiguous());
  TESSEL_ASSIGN_OR_RETURN(m.indptr_, index_tensor(m.pattern_->indptr, values.device()));
  TESSEL_ASSIGN_OR_RETURN(m.col_indices_,
                          index_tensor(m.pattern_->col_indices, values.device()));
  m.derived_ = std::make_shared<DerivedIndices>();
  m.derived_->indptr = m.indptr_;
  return m;
}

Expected<SparseMatrix> SparseMatrix::csr(int64_t rows, int64_t cols, std::vector<int64_t> indptr,
                                         std::vector<int64_t> col_indices,
                                         std::vector<float> values, Device* device) {
  TESSEL_TRY(validate_csr(rows, cols, indptr, col_indices, static_cast<int64_t>(values.size())));
  auto p = std::make_shared<HostPattern>();
  p->rows = rows;
  p->cols = cols;
  p->indptr = std::move(indptr);
  p->col_indices = std::move(col_indices);
  TESSEL_ASSIGN_OR_RETURN(Tensor v, Tensor::from_vector<float>(
                                        values, {static_cast<int64_t>(values.size())}, device));
  return from_pattern(std::move(p), std::move(v));
}

Expected<SparseMatrix> SparseMatrix::coo(int64_t rows, int64_t cols,
                                         std::vector<int64_t> row_indices,
                                         std::vector<int64_t> col_indices,
                                         std::vector<float> values, Device* device,
                                         Duplicates duplicates) {
  TESSEL_TRY(check_shape(rows, cols));
  const size_t n = row_indices.size();
  if (col_indices.size() != n || values.size() != n)
    return invalid_argument("coo: {} row indices, {} column indices and {} values differ", n,
                            col_indices.size(), values.size());
  for (size_t k = 0; k < n; ++k) {
    if (row_indices[k] < 0 || row_indices[k] >= rows)
      return out_of_range("coo: row index {} at position {} is outside [0, {})", row_indices[k],
                          k, rows);
    if (col_indices[k] < 0 || col_indices[k] >= cols)
      return out_of_range("coo: column index {} at position {} is outside [0, {})",
                          col_indices[k], k, cols);
  }
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return row_indices[a] != row_indices[b] ? row_indices[a] < row_indices[b]
                                            : col_indices[a] < col_indices[b];
  });
  auto p = std::make_shared<HostPattern>();
  p->rows = rows;
  p->cols = cols;
  p->indptr.assign(static_cast<size_t>(rows + 1), 0);
  std::vector<float> sorted;
  sorted.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t k = order[i];
    if (i > 0 && row_indices[k] == row_indices[order[i - 1]] &&
        col_indices[k] == col_indices[order[i - 1]]) {
      if (duplicates == Duplicates::kError)
        return invalid_argument(
            "coo: ({}, {}) appears at positions {} and {}; pass Duplicates::kSum to add them up",
            row_indices[k], col_indices[k], order[i - 1], k);
      sorted.back() += values[k];
      continue;
    }
    p->col_indices.push_back(col_indices[k]);
    p->indptr[row_indices[k] + 1] += 1;
    sorted.push_back(values[k]);
  }
  std::partial_sum(p->indptr.begin(), p->indptr.end(), p->indptr.begin());
  TESSEL_ASSIGN_OR_RETURN(Tensor v, Tensor::from_vector<float>(
                                        sorted, {static_cast<int64_t>(sorted.size())}, device));
  TESSEL_ASSIGN_OR_RETURN(SparseMatrix m, from_pattern(std::move(p), std::move(v)));
  return m.to(SparseFormat::kCoo);
}

Expected<SparseMatrix> SparseMatrix::from_dense(const Tensor& dense, SparseFormat format,
                                                double threshold, int64_t block_rows,
                                                int64_t block_cols) {
  if (dense.rank() != 2 || dense.dtype() != DType::kF32)
    return invalid_argument("from_dense: needs an f32 matrix, got {} {}",
                            dtype_name(dense.dtype()), shape_string(dense.shape()));
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> host, dense.to_vector<float>());
  auto p = std::make_shared<HostPattern>();
  p->rows = dense.size(0);
  p->cols = dense.size(1);
  p->indptr.push_back(0);
  std::vector<float> values;
  for (int64_t r = 0; r < p->rows; ++r) {
    for (int64_t c = 0; c < p->cols; ++c) {
      float v = host[r * p->cols + c];
      if (std::fabs(v) > threshold || std::isnan(v)) {
        p->col_indices.push_back(c);
        values.push_back(v);
      }
    }
    p->indptr.push_back(static_cast<int64_t>(values.size()));
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor v,
                          Tensor::from_vector<float>(values, {static_cast<int64_t>(values.size())},
                                                     dense.device()));
  TESSEL_ASSIGN_OR_RETURN(SparseMatrix m, from_pattern(std::move(p), std::move(v)));
  return m.to(format, block_rows, block_cols);
}

double SparseMatrix::density() const {
  double cells = static_cast<double>(rows()) * static_cast<double>(cols());
  return cells == 0 ? 0.0 : static_cast<double>(nnz()) / cells;
}

Expected<SparseMatrix> SparseMatrix::with_values(Tensor values) const {
  if (values.dtype() != DType::kF32 || values.shape() != values_.shape() ||
      values.device() != device())
    return invalid_argument("with_values: needs f32 {} on {}, got {} {} on {}",
                            shape_string(values_.shape()), device()->id(),
                            dtype_name(values.dtype()), shape_string(values.shape()),
                            values.device()->id());
  SparseMatrix m = *this;
  TESSEL_ASSIGN_OR_RETURN(m.values_, values.contiguous());
  return m;
}

Expected<Tensor> SparseMatrix::expanded_rows() const {
  if (format_ == SparseFormat::kCoo) return row_indices_;
  std::lock_guard<std::mutex> lock(derived_->mutex);
  if (!derived_->expanded_rows.defined()) {
    TESSEL_ASSIGN_OR_RETURN(derived_->expanded_rows,
                            index_tensor(expand_rows(*pattern_), device()));
  }
  return derived_->expanded_rows;
}

Expected<const BlockLayout*> SparseMatrix::blocks(int64_t block_rows,
                                                              int64_t block_cols) const {
  std::lock_guard<std::mutex> lock(derived_->mutex);
  for (const BlockLayout& b : derived_->blocks)
    if (b.block_rows == block_rows && b.block_cols == block_cols) return &b;
  std::vector<int64_t> positions;
  HostPattern p = block_pattern(*pattern_, block_rows, block_cols, &positions);
  BlockLayout b{block_rows, block_cols, p.nnz(), {}, {}, {}};
  TESSEL_ASSIGN_OR_RETURN(b.indptr, index_tensor(p.indptr, device()));
  TESSEL_ASSIGN_OR_RETURN(b.col_indices, index_tensor(p.col_indices, device()));
  TESSEL_ASSIGN_OR_RETURN(b.positions, index_tensor(positions, device()));
  derived_->blocks.push_back(std::move(b));
  return &derived_->blocks.back();
}

Expected<SparseMatrix::Transposed> SparseMatrix::transposed() const {
  std::lock_guard<std::mutex> lock(derived_->mutex);
  if (!derived_->have_transposed) {
    std::vector<int64_t> permutation;
    auto t = std::make_shared<HostPattern>(transpose_pattern(*pattern_, &permutation));
    std::vector<int64_t> inverse(permutation.size());
    for (size_t i = 0; i < permutation.size(); ++i)
      inverse[permutation[i]] = static_cast<int64_t>(i);
    Transposed& out = derived_->transposed;
    TESSEL_ASSIGN_OR_RETURN(out.indptr, index_tensor(t->indptr, device()));
    TESSEL_ASSIGN_OR_RETURN(out.col_indices, index_tensor(t->col_indices, device()));
    TESSEL_ASSIGN_OR_RETURN(out.permutation, index_tensor(permutation, device()));
    TESSEL_ASSIGN_OR_RETURN(out.inverse, index_tensor(inverse, device()));
    out.pattern = std::move(t);
    derived_->have_transposed = true;
  }
  return derived_->transposed;
}

Expected<SparseMatrix> SparseMatrix::to(SparseFormat format, int64_t block_rows,
                                        int64_t block_cols) const {
  if (format_ == SparseFormat::kBsr) {
    // Back to CSR order: each value from its place in the blocks.
    TESSEL_ASSIGN_OR_RETURN(const BlockLayout* b, blocks(block_rows_, block_cols_));
    TESSEL_ASSIGN_OR_RETURN(Tensor flat, values_.reshape({values_.numel()}));
    TESSEL_ASSIGN_OR_RETURN(Tensor v, gather(flat, b->positions));
    SparseMatrix csr = *this;
    csr.format_ = SparseFormat::kCsr;
    csr.values_ = v;
    csr.indptr_ = derived_->indptr;
    TESSEL_ASSIGN_OR_RETURN(csr.col_indices_, index_tensor(pattern_->col_indices, device()));
    csr.block_rows_ = csr.block_cols_ = 1;
    if (format == SparseFormat::kBsr) return csr.to(format, block_rows, block_cols);
    return csr.to(format);
  }
  SparseMatrix m = *this;
  m.format_ = format;
  m.indptr_ = Tensor();
  m.row_indices_ = Tensor();
  switch (format) {
    case SparseFormat::kCsr:
      m.indptr_ = derived_->indptr;
      return m;
    case SparseFormat::kCoo: {
      TESSEL_ASSIGN_OR_RETURN(m.row_indices_, expanded_rows());
      return m;
    }
    case SparseFormat::kBsr: {
      if (block_rows < 1 || block_cols < 1)
        return invalid_argument("bsr: blocks of {} x {}", block_rows, block_cols);
      TESSEL_ASSIGN_OR_RETURN(const BlockLayout* b, blocks(block_rows, block_cols));
      TESSEL_ASSIGN_OR_RETURN(Tensor flat, Tensor::zeros({1, b->count * block_rows * block_cols},
                                                         DType::kF32, device()));
      TESSEL_ASSIGN_OR_RETURN(Tensor zero_rows, Tensor::zeros({nnz()}, DType::kI64, device()));
      if (nnz() > 0)
        TESSEL_TRY(
            ops::launch_kernel("scatter_add", {{"T", "f32"}}, {zero_rows, b->positions, values_, flat}));
      TESSEL_ASSIGN_OR_RETURN(m.values_, flat.reshape({b->count, block_rows, block_cols}));
      m.indptr_ = b->indptr;
      m.col_indices_ = b->col_indices;
      m.block_rows_ = block_rows;
      m.block_cols_ = block_cols;
      return m;
    }
  }
  return internal_error("unknown sparse format");
}

Expected<Tensor> SparseMatrix::to_dense() const {
  if (format_ == SparseFormat::kBsr) {
    TESSEL_ASSIGN_OR_RETURN(SparseMatrix csr, to(SparseFormat::kCsr));
    return csr.to_dense();
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor d, Tensor::zeros({rows(), cols()}, DType::kF32, device()));
  if (nnz() == 0) return d;
  TESSEL_ASSIGN_OR_RETURN(Tensor r, expanded_rows());
  TESSEL_TRY(ops::launch_kernel("scatter_add", {{"T", "f32"}}, {r, col_indices_, values_, d}));
  return d;
}

Expected<SparseMatrix> SparseMatrix::transpose() const {
  if (format_ == SparseFormat::kBsr) {
    TESSEL_ASSIGN_OR_RETURN(SparseMatrix csr, to(SparseFormat::kCsr));
    TESSEL_ASSIGN_OR_RETURN(SparseMatrix t, csr.transpose());
    return t.to(SparseFormat::kBsr, block_cols_, block_rows_);
  }
  std::vector<int64_t> permutation;
  auto t = std::make_shared<HostPattern>(transpose_pattern(*pattern_, &permutation));
  TESSEL_ASSIGN_OR_RETURN(Tensor pos, index_tensor(permutation, device()));
  TESSEL_ASSIGN_OR_RETURN(Tensor v, gather(values_, pos));
  TESSEL_ASSIGN_OR_RETURN(SparseMatrix m, from_pattern(std::move(t), v));
  return m.to(format_);
}

Expected<SparseMatrix> SparseMatrix::to_device(Device* device) const {
  TESSEL_ASSIGN_OR_RETURN(Tensor v, values_.to(device));
  if (format_ == SparseFormat::kBsr) {
    TESSEL_ASSIGN_OR_RETURN(SparseMatrix csr, to(SparseFormat::kCsr));
    TESSEL_ASSIGN_OR_RETURN(SparseMatrix moved, csr.to_device(device));
    return moved.to(SparseFormat::kBsr, block_rows_, block_cols_);
  }
  TESSEL_ASSIGN_OR_RETURN(SparseMatrix m, from_pattern(pattern_, v));
  return m.to(format_);
}

std::string SparseMatrix::describe() const {
  std::string block =
      format_ == SparseFormat::kBsr ? fmt::format(" ({} x {} blocks)", block_rows_, block_cols_)
                                    : "";
  return fmt::format("{}{} {} x {}, {} nnz ({:.3g}%) on {}", format_name(format_), block, rows(),
                     cols(), nnz(), 100 * density(), device()->id());
}

}  // namespace tessel::sparse
