# Benchmarks (`boostlm bench ...`): sources of boostlm_core. They sit above the trainer: they build
# models, optimizers and process groups, and time them.
target_sources(boostlm_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/layout_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/step_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_step.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pipeline_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics_bench.cpp
)
