# The CUDA backend (issue 29, its first brick): the kernels of src/kernels/*.h on device pointers
# with a stream argument, in namespace boostlm::cuda, as a library of its own. Included from
# src/kernels/sources.cmake only when CUDA is enabled (BOOSTLM_CUDA); nothing links it but its
# tests yet (the alias boostlm_kernels stays the CPU backend).
# With BOOSTLM_CUDA=EMULATE the .cu files are compiled as rewritten C++ against the emulated
# device (src/cuda_emulator), which stands where the CUDA runtime and cuBLASLt would.
if(NOT BOOSTLM_CUDA_EMULATE)
  find_package(CUDAToolkit REQUIRED)
endif()
set(BOOSTLM_CUDA_KERNEL_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/launch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rmsnorm.cu
  ${CMAKE_CURRENT_LIST_DIR}/activation.cu
  ${CMAKE_CURRENT_LIST_DIR}/adamw.cu
  ${CMAKE_CURRENT_LIST_DIR}/embedding.cu
  ${CMAKE_CURRENT_LIST_DIR}/rope.cu
  ${CMAKE_CURRENT_LIST_DIR}/caching_allocator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_allocator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/event_timer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/event_timer_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_measure.cpp
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.cu
  ${CMAKE_CURRENT_LIST_DIR}/rmsnorm_split.cu
  ${CMAKE_CURRENT_LIST_DIR}/cross_entropy.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_mma.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_reference.cu
  ${CMAKE_CURRENT_LIST_DIR}/reference_gemm.cu
  ${CMAKE_CURRENT_LIST_DIR}/plans.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_cached.cu
  ${CMAKE_CURRENT_LIST_DIR}/lax.cu
  ${CMAKE_CURRENT_LIST_DIR}/table.cpp
)
if(BOOSTLM_CUDA_EMULATE)
  boostlm_emulated_cuda_sources(BOOSTLM_CUDA_KERNEL_SOURCES)
endif()
add_library(boostlm_kernels_cuda STATIC ${BOOSTLM_CUDA_KERNEL_SOURCES})
target_include_directories(boostlm_kernels_cuda PUBLIC ${PROJECT_SOURCE_DIR}/src)
if(BOOSTLM_CUDA_EMULATE)
  target_link_libraries(boostlm_kernels_cuda PUBLIC boostlm_base boostlm_cuda_emulator)
else()
  # cuBLASLt is opened on the first GEMM (cublaslt_loader.cpp), not linked: its start-up costs every
  # process that links it 0.3-0.5 s, CPU runs included.
  target_sources(boostlm_kernels_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cublaslt_loader.cpp)
  get_target_property(boostlm_cublaslt_path CUDA::cublasLt IMPORTED_LOCATION)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cublaslt_loader.cpp PROPERTIES
    COMPILE_DEFINITIONS
    "BOOSTLM_CUBLASLT_SONAME=\"libcublasLt.so.${CUDAToolkit_VERSION_MAJOR}\";BOOSTLM_CUBLASLT_PATH=\"${boostlm_cublaslt_path}\"")
  target_link_libraries(boostlm_kernels_cuda PUBLIC boostlm_base CUDA::cudart ${CMAKE_DL_LIBS})
endif()
# The backend-neutral kernel code (BOOSTLM_KERNEL_COMMON_SOURCES: the GEMM counters gemm.cpp books
# into) is compiled once, into the CPU backend's library, until a common library holds it.
target_link_libraries(boostlm_kernels_cuda PUBLIC boostlm_kernels_cpu)
target_compile_definitions(boostlm_kernels_cuda PUBLIC BOOSTLM_HAVE_CUDA=1)
# Warnings are errors in the .cu files (nvcc's own and its host compiler's); the .cpp files take
# the project's C++ options.
set(BOOSTLM_CUDA_WARNINGS -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-Werror)
target_compile_options(boostlm_kernels_cuda PRIVATE
                       "$<$<COMPILE_LANGUAGE:CUDA>:${BOOSTLM_CUDA_WARNINGS}>")
