// Convolutional families: ResNet-style stacks and an AmoebaNet-like cell stack
// with branches inside cells and skip inputs across cells.
//
// AmoebaNet-like cell i (inputs h[i-2], h[i-1]; stride 2 in reduction cells):
//
//   h[i-2] -> p0 (1x1) --+-- sep3x3 ------+-- n0 (add) -- sep3x3 --+
//                        +-- maxpool --+  |                        +-- n2 (add)
//   h[i-1] -> p1 (1x1) --+-- avgpool --|--+                        |
//                        +-- sep5x5 ---+----- n1 (add) ------------+
//   h[i] = concat(n0, n1, n2)                        (3 x the cell's filters)
//
// N normal cells in three groups of N/3, with a reduction cell (filters x2,
// spatial /2) between groups, after a stride-2 stem, as AmoebaNet-D(N, F).
#include "models/families.hpp"

#include "schedule/error.hpp"

namespace pipetwin::models {
namespace {

struct Tensor {
  int layer;  // producer
  std::int64_t channels, height, width;
  std::int64_t elems() const { return channels * height * width; }
};

std::int64_t out_size(std::int64_t size, std::int64_t stride) { return (size + stride - 1) / stride; }

class Builder {
 public:
  explicit Builder(Model& m) : m_(m) {}

  // Conv k x k (+BN, ReLU). Weighted layers: I = W = F in multiply-adds.
  Tensor conv(const std::string& name, const Tensor& in, std::int64_t out_c, std::int64_t k, std::int64_t stride,
              LayerKind kind = LayerKind::Conv) {
    const std::int64_t ho = out_size(in.height, stride), wo = out_size(in.width, stride);
    LayerShape s = spatial(in, out_c, k, stride);
    s.relu = true;
    LayerCost c;
    const double positions = static_cast<double>(ho * wo);
    if (kind == LayerKind::SepConv) {
      c.forward_flops = 2 * positions * in.channels * (k * k + out_c);
      c.params = in.channels * k * k + in.channels * out_c + 2 * out_c;
      c.stashed_elems = in.elems() + in.channels * ho * wo + out_c * ho * wo;
    } else {
      c.forward_flops = 2 * positions * static_cast<double>(in.channels * out_c * k * k);
      c.params = in.channels * out_c * k * k + 2 * out_c;
      c.stashed_elems = in.elems() + out_c * ho * wo;
    }
    c.input_grad_flops = m_.layers.empty() ? 0 : c.forward_flops;
    c.weight_grad_flops = c.forward_flops;
    c.output_elems = out_c * ho * wo;
    return add_layer(name, kind, s, c, {in.layer}, {-1, out_c, ho, wo});
  }

  Tensor pool(const std::string& name, const Tensor& in, std::int64_t k, std::int64_t stride, bool max) {
    const std::int64_t ho = out_size(in.height, stride), wo = out_size(in.width, stride);
    LayerShape s = spatial(in, in.channels, k, stride);
    s.max_pool = max;
    LayerCost c;
    c.forward_flops = static_cast<double>(ho * wo * in.channels * k * k);
    c.input_grad_flops = c.forward_flops;
    c.stashed_elems = max ? in.elems() : 0;
    c.output_elems = in.channels * ho * wo;
    return add_layer(name, LayerKind::Pool, s, c, {in.layer}, {-1, in.channels, ho, wo});
  }

  Tensor add(const std::string& name, const Tensor& a, const Tensor& b) {
    if (a.channels != b.channels || a.height != b.height) throw Error("model: " + name + " adds tensors of different shapes");
    LayerCost c;
    c.forward_flops = static_cast<double>(a.elems());
    c.input_grad_flops = static_cast<double>(a.elems());
    c.output_elems = a.elems();
    c.keeps_input = false;
    return add_layer(name, LayerKind::Add, spatial(a, a.channels, 0, 1), c, {a.layer, b.layer}, {-1, a.channels, a.height, a.width});
  }

  Tensor concat(const std::string& name, const std::vector<Tensor>& parts) {
    std::int64_t channels = 0;
    std::vector<int> inputs;
    for (const auto& p : parts) {
      channels += p.channels;
      inputs.push_back(p.layer);
    }
    LayerCost c;
    c.output_elems = channels * parts[0].height * parts[0].width;
    c.keeps_input = false;
    return add_layer(name, LayerKind::Concat, spatial(parts[0], channels, 0, 1), c, inputs,
                     {-1, channels, parts[0].height, parts[0].width});
  }

  Tensor residual_block(const std::string& name, const Tensor& in, std::int64_t out_c, std::int64_t stride) {
    const std::int64_t ho = out_size(in.height, stride), wo = out_size(in.width, stride);
    const double positions = static_cast<double>(ho * wo);
    const bool projection = stride != 1 || in.channels != out_c;
    LayerCost c;
    c.forward_flops = 2 * positions * static_cast<double>(9 * in.channels * out_c + 9 * out_c * out_c +
                                                          (projection ? in.channels * out_c : 0));
    c.input_grad_flops = c.forward_flops;
    c.weight_grad_flops = c.forward_flops;
    c.params = 9 * in.channels * out_c + 9 * out_c * out_c + 4 * out_c + (projection ? in.channels * out_c + 2 * out_c : 0);
    c.stashed_elems = in.elems() + 3 * out_c * ho * wo;
    c.output_elems = out_c * ho * wo;
    return add_layer(name, LayerKind::ResidualBlock, spatial(in, out_c, 3, stride), c, {in.layer}, {-1, out_c, ho, wo});
  }

  void head(const Tensor& in, std::int64_t classes) {
    LayerShape s = spatial(in, in.channels, 0, 1);
    s.in_features = in.channels;
    s.out_features = classes;
    LayerCost c;
    c.forward_flops = static_cast<double>(in.elems()) + 2.0 * static_cast<double>(in.channels * classes);
    c.input_grad_flops = c.forward_flops;
    c.weight_grad_flops = 2.0 * static_cast<double>(in.channels * classes);
    c.params = in.channels * classes + classes;
    c.stashed_elems = in.channels + classes;
    c.keeps_input = false;  // the pooled features, not the input
    c.weight_grad_elems = in.channels + classes;  // its linear map's input and output gradient (convolutions defer none)
    c.output_elems = 1;
    add_layer("head", LayerKind::ClassifierHead, s, c, {in.layer}, {-1, 1, 1, 1});
  }

 private:
  static LayerShape spatial(const Tensor& in, std::int64_t out_c, std::int64_t k, std::int64_t stride) {
    LayerShape s;
    s.in_channels = in.channels;
    s.out_channels = out_c;
    s.kernel = k;
    s.stride = stride;
    s.in_height = in.height;
    s.in_width = in.width;
    return s;
  }

  Tensor add_layer(const std::string& name, LayerKind kind, const LayerShape& s, const LayerCost& c,
                   std::vector<int> inputs, Tensor out) {
    if (inputs.size() == 1 && inputs[0] < 0) inputs.clear();  // reads the model input
    m_.layers.push_back({name, kind, s, c, std::move(inputs)});
    out.layer = static_cast<int>(m_.layers.size()) - 1;
    return out;
  }

  Model& m_;
};

}  // namespace

Model resnet_model(const ResNetSpec& spec, Precision precision, std::string name) {
  Model m;
  m.name = std::move(name);
  m.family = "resnet";
  m.precision = precision;
  m.input_elems = spec.in_channels * spec.image * spec.image;
  Builder b(m);
  Tensor x = b.conv("stem", {-1, spec.in_channels, spec.image, spec.image}, spec.stem_channels, 3, 1);
  std::int64_t channels = spec.stem_channels;
  for (std::size_t stage = 0; stage < spec.stages.size(); ++stage) {
    if (stage > 0) channels *= 2;
    for (std::int64_t i = 0; i < spec.stages[stage]; ++i) {
      const std::int64_t stride = stage > 0 && i == 0 ? 2 : 1;
      x = b.residual_block("stage" + std::to_string(stage) + ".block" + std::to_string(i), x, channels, stride);
    }
  }
  b.head(x, spec.classes);
  return m;
}

Model amoebanet_model(const AmoebaNetSpec& spec, Precision precision, std::string name) {
  if (spec.cells % 3 != 0) throw Error("model: amoebanet needs cells (N) to be a multiple of 3, got " + std::to_string(spec.cells));
  Model m;
  m.name = std::move(name);
  m.family = "amoebanet";
  m.precision = precision;
  m.input_elems = spec.in_channels * spec.image * spec.image;
  Builder b(m);
  const Tensor stem = b.conv("stem", {-1, spec.in_channels, spec.image, spec.image}, spec.filters, 3, 2);
  Tensor prev2 = stem, prev = stem;
  std::int64_t filters = spec.filters;
  const auto cell = [&](const std::string& n, std::int64_t stride) {
    // p0 must reach prev's spatial size first when prev2 is larger (after a reduction).
    const std::int64_t align = prev2.height > prev.height ? 2 : 1;
    const Tensor p0 = b.conv(n + ".p0", prev2, filters, 1, align);
    const Tensor p1 = b.conv(n + ".p1", prev, filters, 1, 1);
    const Tensor a = b.conv(n + ".sep3x3_a", p0, filters, 3, stride, LayerKind::SepConv);
    const Tensor bp = b.pool(n + ".avgpool", p1, 3, stride, false);
    const Tensor n0 = b.add(n + ".n0", a, bp);
    const Tensor c = b.conv(n + ".sep5x5", p1, filters, 5, stride, LayerKind::SepConv);
    const Tensor d = b.pool(n + ".maxpool", p0, 3, stride, true);
    const Tensor n1 = b.add(n + ".n1", c, d);
    const Tensor e = b.conv(n + ".sep3x3_b", n0, filters, 3, 1, LayerKind::SepConv);
    const Tensor n2 = b.add(n + ".n2", e, n1);
    prev2 = prev;
    prev = b.concat(n + ".out", {n0, n1, n2});
  };
  int index = 0;
  for (int group = 0; group < 3; ++group) {
    if (group > 0) {
      filters *= 2;
      cell("reduce" + std::to_string(group), 2);
    }
    for (std::int64_t i = 0; i < spec.cells / 3; ++i) cell("cell" + std::to_string(index++), 1);
  }
  b.head(prev, spec.classes);
  return m;
}

}  // namespace pipetwin::models
