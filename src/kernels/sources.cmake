# The kernels: the backend-neutral interface (src/kernels/*.h: pointers, shapes, strides, a dtype),
# the neutral code beside it (GEMM counters, GEMM rate measurement, which only call the interface),
# and one backend folder that implements the interface as a library of its own,
# boostlm_kernels_<backend>, built from BOOSTLM_KERNEL_COMMON_SOURCES and its folder's files.
# The rest of the engine links the alias boostlm_kernels and never names a backend.
set(BOOSTLM_KERNEL_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/gemm_counters.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_measure.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dispatch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/graph.cpp
)
include(${CMAKE_CURRENT_LIST_DIR}/cpu/sources.cmake)
add_library(boostlm_kernels ALIAS boostlm_kernels_cpu)
# The CUDA backend beside it, built (and tested) when CUDA is enabled (or emulated): a library of
# its own that fills the whole kernel table and is linked into the boostlm binary, where
# `--device cuda` selects its table at run time (kernels/dispatch.h). The alias stays the CPU
# backend's, which every build has and every device falls back on for host work.
if(BOOSTLM_WITH_CUDA)
  include(${CMAKE_CURRENT_LIST_DIR}/cuda/sources.cmake)
endif()
