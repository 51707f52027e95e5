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
  ${CMAKE_CURRENT_LIST_DIR}/lax.cpp
  ${CMAKE_CURRENT_LIST_DIR}/table.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checked_table.cpp
)
target_link_libraries(boostlm_kernels_cpu PUBLIC boostlm_base OpenMP::OpenMP_CXX PRIVATE DNNL::dnnl)

# The same backend compiled without AVX-512 (x86-64-v3: AVX2 and FMA), where the build targets
# AVX-512: the kernels' own ISA dispatch is at compile time (BOOSTLM_VEC16, __AVX512BF16__ in
# vec_math.h and beside it), so an AVX2-only CPU such as AMD Zen 3 runs code that an AVX-512 build
# never executes. The kernel tests link this copy too (boostlm_kernel_tests_avx2, run with oneDNN
# capped at AVX2), so those paths are tested on every machine that can run them. Nothing else
# links it.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-march=native")
check_cxx_source_compiles("#ifndef __AVX512F__\n#error no AVX-512\n#endif\nint main() {}"
                          BOOSTLM_BUILD_HAS_AVX512)
unset(CMAKE_REQUIRED_FLAGS)
if(BOOSTLM_NATIVE AND BOOSTLM_BUILD_HAS_AVX512)
  get_target_property(boostlm_cpu_kernel_sources boostlm_kernels_cpu SOURCES)
  add_library(boostlm_kernels_cpu_avx2 STATIC ${boostlm_cpu_kernel_sources})
  # After the project's -march=native: the later -march wins, and -mno-avx512f drops every AVX-512
  # extension that -march=native spelled out. (The AVX2 kernel tests compile with them too.)
  set(BOOSTLM_AVX2_FLAGS -march=x86-64-v3 -mno-avx512f -mtune=generic)
  target_compile_options(boostlm_kernels_cpu_avx2 PRIVATE ${BOOSTLM_AVX2_FLAGS})
  target_link_libraries(boostlm_kernels_cpu_avx2 PUBLIC boostlm_base OpenMP::OpenMP_CXX
                                                 PRIVATE DNNL::dnnl)
endif()
