#include "engine/pipeline.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/gemm.h"

namespace boostlm {

namespace {

// Message tags: micro-batch i's activations travel as 2i, their gradient as 2i + 1.
int activation_tag(int micro) {
  return 2 * micro;
}
int gradient_tag(int micro) {
  return 2 * micro + 1;
}

}  // namespace

int Pipeline::warmup_forwards(int stages, int stage, int64_t micro_batches) {
  return static_cast<int>(std::min<int64_t>(stages - stage - 1, micro_batches));
}

int Pipeline::micro_slots(int stages, int stage, int64_t micro_batches) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(stages - stage, micro_batches)));
}

Pipeline::Pipeline(Model& model)
    : model_(model), pp_(model.pp()), stage_(model.pp().rank()), stages_(model.pp().size()) {}

void Pipeline::exchange(Residual send, int send_to, int send_tag, Residual recv, int recv_from,
                        int recv_tag) {
  const bool sending = send.data() != nullptr, receiving = recv.data() != nullptr;
  if (!sending && !receiving) return;
  BOOSTLM_PHASE("pipeline_wait");
  const double t0 = now_s();
  CommRequest out, in;
  const int64_t n = model_.boundary_elements();
  if (model_.compute() == DType::bf16) {
    // bf16 training (issue 60): the boundary's activations and gradients cross as bf16: a bf16
    // residual as it is, fp32 rounded on the way out and widened on the way in (as rows of up to
    // 4096: the kernels' threads split rows).
    int64_t cols = 4096;
    while (n % cols != 0) cols /= 2;
    if (receiving) {
      if (!recv.bf16 && recv16_.size() < static_cast<size_t>(n)) recv16_.resize(n);
      in = pp_.irecv(recv.bf16 ? recv.bf16 : recv16_.data(), n, recv_from, recv_tag);
    }
    if (sending) {
      const bf16_t* message = send.bf16;
      if (!message) {
        if (send16_.size() < static_cast<size_t>(n)) send16_.resize(n);
        round_to_bf16(send.f32, n / cols, cols, cols, send16_.data());
        message = send16_.data();
      }
      out = pp_.isend(message, n, send_to, send_tag);
    }
    in.wait();
    out.wait();
    if (receiving && !recv.bf16) widen_bf16(recv16_.data(), n / cols, cols, cols, recv.f32, cols);
    stats_.wait_s += now_s() - t0;
    return;
  }
  if (receiving) in = pp_.irecv(recv.f32, n, recv_from, recv_tag);
  if (sending) out = pp_.isend(send.f32, n, send_to, send_tag);
  in.wait();
  out.wait();
  stats_.wait_s += now_s() - t0;
}

void Pipeline::forward_step(const MicroBatch& mb, int micro, bool first_of_step, float grad_scale,
                            double& loss) {
  const double t0 = now_s();
  if (!calls_only_ && model_.stage_graphs_possible()) {
    loss += model_.graphed_stage_forward(mb.inputs, mb.targets, micro, first_of_step, grad_scale);
  } else {
    model_.set_micro(micro);
    // schedule_calls: micro-batch `micro`'s staged ids (the weights rounded before the graph), its
    // loss to its slot (stage_loss then returns 0).
    if (calls_only_) model_.select_staged(micro);
    model_.stage_forward(mb.inputs, first_of_step && !calls_only_);
    if (model_.last_stage()) loss += model_.stage_loss(mb.targets, true, grad_scale);
  }
  stats_.compute_s += now_s() - t0;
}

void Pipeline::backward_step(const MicroBatch& mb, int micro, BackwardObserver* observer) {
  const double t0 = now_s();
  // The micro-batch with an observer (the last: a data-parallel reducer's reductions start in its
  // backward and are finished after it, outside any graph) is launched from the host.
  if (!calls_only_ && model_.stage_graphs_possible() && !observer) {
    model_.graphed_stage_backward(mb.inputs, micro);
  } else {
    model_.set_micro(micro);
    if (calls_only_) model_.select_staged(micro);
    model_.stage_backward(mb.inputs, observer);
  }
  stats_.compute_s += now_s() - t0;
}

void Pipeline::check_slots(int m) const {
  BOOSTLM_ASSERT_MSG(m > 0, "a pipeline step needs at least one micro-batch");
  if (model_.micro_slots() < micro_slots(stages_, stage_, m))
    throw error("pipeline stage ", stage_, " of ", stages_, " needs activations for ",
                micro_slots(stages_, stage_, m),
                " micro-batches in flight, the model was built for ", model_.micro_slots());
}

double Pipeline::forward_backward(std::span<const MicroBatch> micro, int64_t B, int64_t T,
                                  float grad_scale, BackwardObserver* observer) {
  const int m = static_cast<int>(micro.size());
  check_slots(m);
  model_.prepare(B, T);
  stats_ = {};
  const double start = now_s();
  double loss = 0;
  // Without stages: each micro-batch's forward, loss and backward is one CUDA graph, replayed
  // (model.h, graphed_forward_backward), the last one's with the observer's calls (a data-parallel
  // reducer over NCCL) and its backward_done in it. An observer that waits on the host (MPI, the
  // staged transport) keeps the micro-batches launched from the host.
  if (stages_ == 1 && (observer == nullptr || observer->capturable()) &&
      model_.graphs_possible()) {
    for (int i = 0; i < m; ++i) {
      const double t0 = now_s();
      loss += model_.graphed_forward_backward(micro[i].inputs, micro[i].targets, i == 0,
                                              grad_scale, i + 1 == m ? observer : nullptr);
      stats_.compute_s += now_s() - t0;
    }
    stats_.step_s = now_s() - start;
    return loss;
  }
  one_f_one_b(micro, grad_scale, observer, loss);
  if (observer) observer->backward_done();
  stats_.step_s = now_s() - start;
  // The loss lives on the last stage; every stage reports it (control data, not counted).
  pp_.broadcast_bytes(&loss, sizeof loss, stages_ - 1);
  return loss;
}

void Pipeline::schedule_calls(std::span<const MicroBatch> micro, float grad_scale,
                              BackwardObserver* observer) {
  check_slots(static_cast<int>(micro.size()));
  stats_ = {};
  calls_only_ = true;
  double unused = 0;
  one_f_one_b(micro, grad_scale, observer, unused);
  calls_only_ = false;
  if (observer) observer->backward_done();
}

void Pipeline::one_f_one_b(std::span<const MicroBatch> micro, float grad_scale,
                           BackwardObserver* observer, double& loss) {
  const int m = static_cast<int>(micro.size());
  const bool first = model_.first_stage(), last = model_.last_stage();
  const int prev = stage_ - 1, next = stage_ + 1;
  // Receiving micro-batch i's input, or its output gradient; sending its output or input gradient.
  auto input = [&](int i) {
    model_.set_micro(i);
    return first ? Residual{} : model_.stage_input();
  };
  auto output = [&](int i) {
    model_.set_micro(i);
    return last ? Residual{} : model_.stage_output();
  };
  auto output_grad = [&]() { return last ? Residual{} : Residual{model_.output_grad()}; };
  // The previous stage's gradient (read only: a const view for the send).
  auto input_grad = [&]() {
    return first ? Residual{} : Residual{const_cast<float*>(model_.input_grad())};
  };
  auto observer_of = [&](int i) { return i + 1 == m ? observer : nullptr; };
  const int warmup = warmup_forwards(stages_, stage_, m), steady = m - warmup;
  for (int i = 0; i < warmup; ++i) {
    exchange({}, 0, 0, input(i), prev, activation_tag(i));
    forward_step(micro[i], i, i == 0, grad_scale, loss);
    exchange(output(i), next, activation_tag(i), {}, 0, 0);
  }
  if (steady > 0) exchange({}, 0, 0, input(warmup), prev, activation_tag(warmup));
  for (int j = 0; j < steady; ++j) {
    const int f = warmup + j;
    forward_step(micro[f], f, f == 0, grad_scale, loss);
    // Send micro-batch f forward while the gradient of micro-batch j comes back.
    exchange(output(f), next, activation_tag(f), output_grad(), next, gradient_tag(j));
    backward_step(micro[j], j, observer_of(j));
    if (j + 1 < steady)
      exchange(input_grad(), prev, gradient_tag(j), input(f + 1), prev, activation_tag(f + 1));
    else
      exchange(input_grad(), prev, gradient_tag(j), {}, 0, 0);
  }
  for (int j = steady; j < m; ++j) {  // cool-down
    exchange({}, 0, 0, output_grad(), next, gradient_tag(j));
    backward_step(micro[j], j, observer_of(j));
    exchange(input_grad(), prev, gradient_tag(j), {}, 0, 0);
  }
}

double PipelineTimes::bubble_fraction() const {
  if (span_s <= 0 || compute_s.empty()) return 0;
  double sum = 0;
  for (size_t s = 0; s < compute_s.size(); ++s) sum += bubble_s(static_cast<int>(s)) / span_s;
  return sum / static_cast<double>(compute_s.size());
}

double PipelineTimes::one_f_one_b_fraction(int stages, int64_t micro_batches) {
  return (stages - 1.0) / (static_cast<double>(micro_batches) + stages - 1.0);
}

PipelineTimes Pipeline::gather_times() {
  const float mine[3] = {static_cast<float>(stats_.step_s), static_cast<float>(stats_.compute_s),
                         stats_.graphed ? 1.0f : 0.0f};
  std::vector<float> all(3 * stages_);
  pp_.all_gather_host(mine, 3, all.data());  // host timings
  PipelineTimes t;
  for (int s = 0; s < stages_; ++s) {
    t.span_s = std::max<double>(t.span_s, all[3 * s]);
    t.compute_s.push_back(all[3 * s + 1]);
    t.graphed = t.graphed || all[3 * s + 2] != 0.0f;
  }
  return t;
}

float Pipeline::forward(const MicroBatch& batch, int64_t B, int64_t T) {
  model_.prepare(B, T);
  const bool first = model_.first_stage(), last = model_.last_stage();
  model_.set_micro(0);
  if (!first) exchange({}, 0, 0, model_.stage_input(), stage_ - 1, activation_tag(0));
  model_.stage_forward(batch.inputs);
  float loss = 0;
  if (last)
    loss = model_.stage_loss(batch.targets, false, 0.0f);
  else
    exchange(model_.stage_output(), stage_ + 1, activation_tag(0), {}, 0, 0);
  pp_.broadcast_bytes(&loss, sizeof loss, stages_ - 1);
  return loss;
}

}  // namespace boostlm
