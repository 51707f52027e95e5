# Communication layer (MPI): sources of boostlm_core.
#
# FindMPI's C component needs the C language enabled (the project is CXX only); the compiler is only
# probed, nothing here is compiled as C. The C bindings are all we use: OMPI_SKIP_MPICXX and
# MPICH_SKIP_MPICXX keep <mpi.h> from pulling in the deprecated MPI-2 C++ bindings (Open MPI's
# mpicxx.h), which would need libmpi_cxx at link time.
enable_language(C)
find_package(MPI REQUIRED COMPONENTS C)
target_sources(boostlm_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bf16_sum.cpp
  ${CMAKE_CURRENT_LIST_DIR}/communicator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/grid.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mpi_runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/overlap.cpp
  ${CMAKE_CURRENT_LIST_DIR}/staged_transport.cpp
  ${CMAKE_CURRENT_LIST_DIR}/transport.cpp
  ${CMAKE_CURRENT_LIST_DIR}/watchdog.cpp
)
target_compile_definitions(boostlm_core PUBLIC OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
target_link_libraries(boostlm_core PUBLIC MPI::MPI_C)

# Device collectives on CUDA (comm/cuda_transport.h, comm/nccl_transport.h), with the CUDA backend.
if(TARGET boostlm_kernels_cuda)
  include(${CMAKE_CURRENT_LIST_DIR}/cuda_sources.cmake)
endif()
