// MNIST-format datasets: finding the four files, reading them, checking they agree.
#include "data/mnist.h"

#include <sys/stat.h>

#include <vector>

#include "data/idx.h"

namespace tessel {
namespace {

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The first existing file among the usual spellings, or an error naming every one tried.
Expected<std::string> find_file(const std::string& folder, const std::string& prefix,
                                const std::string& kind, const std::string& what) {
  const std::string base = folder.empty() || folder.back() == '/' ? folder : folder + "/";
  const std::vector<std::string> candidates = {
      base + prefix + "-" + kind + ".gz",
      base + prefix + "-" + kind,
      // As some archives unpack them: "train-images.idx3-ubyte".
      base + prefix + "-" + kind.substr(0, kind.find('-')) + "." + kind.substr(kind.find('-') + 1),
  };
  for (const std::string& path : candidates)
    if (is_file(path)) return path;
  std::string tried;
  for (const std::string& path : candidates)
    tried += (tried.empty() ? "" : ", ") + path;
  return not_found(
      "no {} file in {}: looked at {} (for Fashion-MNIST, install the Debian package "
      "dataset-fashion-mnist, as scripts/setup.sh does)",
      what, folder, tried);
}

}  // namespace

Expected<ImageDataset> load_mnist(const std::string& folder, std::string_view split) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    return invalid_argument("MNIST split '{}': expected 'train' or 'test'", split);
  }
  ImageDataset ds;
  TESSEL_ASSIGN_OR_RETURN(ds.images_path, find_file(folder, prefix, "images-idx3-ubyte",
                                                    std::string(split) + " images"));
  TESSEL_ASSIGN_OR_RETURN(ds.labels_path, find_file(folder, prefix, "labels-idx1-ubyte",
                                                    std::string(split) + " labels"));
  TESSEL_ASSIGN_OR_RETURN(ds.images, read_idx(ds.images_path));
  TESSEL_ASSIGN_OR_RETURN(Tensor raw_labels, read_idx(ds.labels_path));

  if (ds.images.dtype() != DType::kU8 || ds.images.rank() != 3) {
    return invalid_argument(
        "{}: expected images as unsigned bytes [N, H, W] (idx type 0x08, "
        "rank 3), found {} {}",
        ds.images_path, dtype_name(ds.images.dtype()), shape_string(ds.images.shape()));
  }
  if (raw_labels.dtype() != DType::kU8 || raw_labels.rank() != 1) {
    return invalid_argument(
        "{}: expected labels as unsigned bytes [N] (idx type 0x08, rank 1), "
        "found {} {}",
        ds.labels_path, dtype_name(raw_labels.dtype()), shape_string(raw_labels.shape()));
  }
  if (raw_labels.size(0) != ds.images.size(0)) {
    return invalid_argument(
        "{}: byte offset 4: the label count {} does not match the image count {} at byte offset "
        "4 of {}",
        ds.labels_path, raw_labels.size(0), ds.images.size(0), ds.images_path);
  }
  const int64_t n = raw_labels.size(0);
  TESSEL_ASSIGN_OR_RETURN(ds.labels, Tensor::empty({n}, DType::kI64));
  const uint8_t* in = raw_labels.data<uint8_t>();
  int64_t* out = ds.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (in[i] >= ds.num_classes) {
      return invalid_argument("{}: byte offset {}: expected a label in 0..{}, found {}",
                              ds.labels_path, 8 + i, ds.num_classes - 1, in[i]);
    }
    out[i] = in[i];
  }
  return ds;
}

Expected<Tensor> normalize_images(const Tensor& images, float mean, float std) {
  if (!images.defined() || images.dtype() != DType::kU8)
    return invalid_argument("normalize_images: expected a u8 tensor");
  if (!(std > 0.0f)) return invalid_argument("normalize_images: std must be > 0, got {}", std);
  TESSEL_ASSIGN_OR_RETURN(Tensor host, images.to(cpu_device()));
  TESSEL_ASSIGN_OR_RETURN(host, host.contiguous());
  TESSEL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(host.shape(), DType::kF32));
  const uint8_t* in = host.data<uint8_t>();
  float* values = out.data<float>();
  const float scale = 1.0f / (255.0f * std), shift = -mean / std;
  for (int64_t i = 0, n = host.numel(); i < n; ++i)
    values[i] = in[i] * scale + shift;
  return out;
}

}  // namespace tessel
