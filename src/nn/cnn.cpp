// The small CNN (see cnn.h).
#include "nn/cnn.h"

#include "autograd/functional.h"

namespace tessel::nn {

SmallCnn::SmallCnn(int64_t classes, int64_t image_size)
    : image_size_(image_size), fc1_in_(64 * (image_size / 4) * (image_size / 4)) {
  TESSEL_CHECK(image_size >= 4, "SmallCnn: image_size {} leaves nothing after two 2x2 pools",
               image_size);
  conv1_ =
      &register_module("conv1", std::make_unique<Conv2d>(1, 32, 3, Conv2dOptions{.padding = 1}));
  bn1_ = &register_module("bn1", std::make_unique<BatchNorm2d>(32));
  conv2_ =
      &register_module("conv2", std::make_unique<Conv2d>(32, 64, 3, Conv2dOptions{.padding = 1}));
  bn2_ = &register_module("bn2", std::make_unique<BatchNorm2d>(64));
  fc1_ = &register_module("fc1", std::make_unique<Linear>(fc1_in_, 128));
  fc2_ = &register_module("fc2", std::make_unique<Linear>(128, classes));
}

Expected<Variable> SmallCnn::forward(const Variable& input) {
  Variable x = input;
  if (x.data().rank() == 3) {
    TESSEL_ASSIGN_OR_RETURN(x, autograd::reshape(x, {x.shape()[0], 1, x.shape()[1], x.shape()[2]}));
  }
  const int64_t s = image_size_;
  if (x.data().rank() != 4 || x.shape()[1] != 1 || x.shape()[2] != s || x.shape()[3] != s)
    return invalid_argument("SmallCnn: expected images [N, 1, {}, {}] or [N, {}, {}], got {}", s, s,
                            s, s, shape_string(input.shape()));
  for (auto [conv, bn] : {std::pair{conv1_, bn1_}, std::pair{conv2_, bn2_}}) {
    TESSEL_ASSIGN_OR_RETURN(x, (*conv)(x));
    TESSEL_ASSIGN_OR_RETURN(x, (*bn)(x));
    TESSEL_ASSIGN_OR_RETURN(x, autograd::relu(x));
    TESSEL_ASSIGN_OR_RETURN(x, autograd::max_pool2d(x, {2, 2}, {2, 2}));
  }
  TESSEL_ASSIGN_OR_RETURN(x, autograd::reshape(x, {x.shape()[0], fc1_in_}));
  TESSEL_ASSIGN_OR_RETURN(x, (*fc1_)(x));
  TESSEL_ASSIGN_OR_RETURN(x, autograd::relu(x));
  return (*fc2_)(x);
}

}  // namespace tessel::nn
