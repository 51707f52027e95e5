// The check every parallel test ends with: the sharded model's gradient, gathered to full tensors,
// equals a single process's, tensor by tensor.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "engine/model.h"
#include "test_util.h"

namespace boostlm {

// Gathers model's gradient (a collective over its TP and PP groups: every rank calls it) and
// expects every tensor within `tolerance` relative norm of reference's; `where` names the case.
inline void expect_gradients_match(Model& model, Model& reference, const std::string& where,
                                   double tolerance = 1e-5) {
  FlatBuffer full(model.full_params().total_elements());
  model.gather_full(model.grads(), full);
  for (const auto& p : model.full_params().entries()) {
    const float* ref = reference.grads().view(reference.full_params().at(p.name));
    EXPECT_LT(relative_error(full.view(p), ref, p.numel), tolerance) << p.name << " " << where;
  }
}

}  // namespace boostlm
