// checkpointed(): a LibTorch autograd function that keeps its inputs only.
#include "exec/torch_checkpoint.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

namespace pipetwin::exec {
namespace {

thread_local bool t_selective = false;

struct BodyHolder : torch::CustomClassHolder {
  explicit BodyHolder(CheckpointBody b) : body(std::move(b)) {}
  CheckpointBody body;
};

struct Checkpoint : torch::autograd::Function<Checkpoint> {
  // (Autograd is off here: what `body` computes is not recorded.)
  // (`inputs` as a TensorList: so autograd counts each as an input of its own.)
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, c10::intrusive_ptr<BodyHolder> body,
                                                at::TensorList inputs) {
    ctx->saved_data["body"] = c10::IValue::make_capsule(body);
    const std::vector<at::Tensor> in(inputs.begin(), inputs.end());
    ctx->save_for_backward(in);
    return body->body(in);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto body = c10::static_intrusive_pointer_cast<BodyHolder>(ctx->saved_data["body"].toCapsule());
    // The inputs as leaves of the re-run: those whose gradient is asked for
    // (a saved input does not say it needs one) collect it.
    std::vector<at::Tensor> leaves;
    std::vector<bool> needed;
    const auto saved = ctx->get_saved_variables();
    for (std::size_t i = 0; i < saved.size(); ++i) {
      const at::Tensor& t = saved[i];
      needed.push_back(t.defined() && ctx->needs_input_grad(i));
      leaves.push_back(!t.defined() ? t : needed.back() ? t.detach().requires_grad_(true) : t.detach());
    }
    std::vector<at::Tensor> outputs;
    {
      at::AutoGradMode on(true);
      outputs = body->body(leaves);
    }
    std::vector<at::Tensor> roots, seeds;
    for (std::size_t i = 0; i < outputs.size() && i < grads.size(); ++i) {
      if (outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        seeds.push_back(grads[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, seeds);
    torch::autograd::variable_list out{at::Tensor()};  // `body` is no tensor
    for (std::size_t i = 0; i < leaves.size(); ++i) out.push_back(needed[i] ? leaves[i].grad() : at::Tensor());
    return out;
  }
};

}  // namespace

std::vector<at::Tensor> checkpointed(const CheckpointBody& body, const std::vector<at::Tensor>& inputs) {
  if (!at::GradMode::is_enabled()) return body(inputs);
  if (std::any_of(inputs.begin(), inputs.end(), [](const at::Tensor& t) { return t.defined() && t.requires_grad(); })) {
    return Checkpoint::apply(c10::make_intrusive<BodyHolder>(body), at::TensorList(inputs));
  }
  // No input asks for a gradient (a first stage's first layers read the raw
  // input): autograd would leave the checkpoint out of the graph, and the
  // weights its body reads without gradients. A leaf that asks for one,
  // which the body does not read, keeps it in.
  std::vector<at::Tensor> anchored = inputs;
  anchored.push_back(at::zeros({}, at::kFloat).requires_grad_(true));
  const auto without_anchor = [body, n = inputs.size()](const std::vector<at::Tensor>& in) {
    return body(std::vector<at::Tensor>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n)));
  };
  return Checkpoint::apply(c10::make_intrusive<BodyHolder>(without_anchor), at::TensorList(anchored));
}

SelectiveRecompute::SelectiveRecompute(bool on) : previous_(t_selective) { t_selective = on; }
SelectiveRecompute::~SelectiveRecompute() { t_selective = previous_; }

at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& core) {
  if (!t_selective) return core(q, k, v);
  return checkpointed([core](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{core(in[0], in[1], in[2])}; },
                      {q, k, v})
      .at(0);
}

std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)> scaled_softmax_core(std::int64_t dh) {
  return [dh](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    auto scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh)));
    return at::matmul(at::softmax(scores, -1), v);
  };
}

}  // namespace pipetwin::exec
