# The CPU backend: oneDNN for GEMM, OpenMP loops for the rest.
add_library(boostlm_kernels_cpu STATIC
  ${BOOSTLM_KERNEL_COMMON_SOURCES}
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rmsnorm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rope.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_tiled.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_cached.cpp
  ${CMAKE_CURRENT_LIST_DIR}/svd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/activation.cpp
  ${CMAKE_CURRENT_LIST_DIR}/embedding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cross_entropy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/adamw.cpp
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.cpp
  ${CMAKE_CURRENT_LIST_DIR}/table.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checked_table.cpp
)
target_link_libraries(boostlm_kernels_cpu PUBLIC boostlm_base OpenMP::OpenMP_CXX PRIVATE DNNL::dnnl)
