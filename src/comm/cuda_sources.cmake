# boostlm_comm_cuda: device collectives behind Communicator on a CUDA GPU (issue 29). The staged
# path's CUDA copies always; NCCL where its header and library are found (the CUDA toolkit here
# ships them in its include/ and lib/; GPU machines have libnccl.so.2 in PyTorch's wheels). Without
# NCCL the library builds with the staged path alone. Nothing in the engine links it yet.
# With BOOSTLM_CUDA=EMULATE the emulated device (src/cuda_emulator) is the CUDA runtime, and
# NCCL where its emulated NCCL is built (boostlm_cuda_emulator_nccl).
add_library(boostlm_comm_cuda STATIC ${CMAKE_CURRENT_LIST_DIR}/cuda_transport.cpp)
if(BOOSTLM_CUDA_EMULATE)
  target_link_libraries(boostlm_comm_cuda PUBLIC boostlm_core boostlm_kernels_cuda
                                                 boostlm_cuda_emulator)
  if(BOOSTLM_CUDA_EMULATOR_NCCL)
    set(BOOSTLM_NCCL_INCLUDE_DIR ${BOOSTLM_CUDA_TOOLKIT_INCLUDE_DIR})
    set(BOOSTLM_NCCL_LIBRARY boostlm_cuda_emulator)
  endif()
else()
  find_path(BOOSTLM_NCCL_INCLUDE_DIR nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
  find_library(BOOSTLM_NCCL_LIBRARY nccl
               HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  target_link_libraries(boostlm_comm_cuda PUBLIC boostlm_core boostlm_kernels_cuda CUDA::cudart)
endif()
if(BOOSTLM_NCCL_INCLUDE_DIR AND BOOSTLM_NCCL_LIBRARY)
  target_sources(boostlm_comm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/nccl_transport.cpp)
  target_include_directories(boostlm_comm_cuda PUBLIC ${BOOSTLM_NCCL_INCLUDE_DIR})
  target_link_libraries(boostlm_comm_cuda PUBLIC ${BOOSTLM_NCCL_LIBRARY})
  target_compile_definitions(boostlm_comm_cuda PUBLIC BOOSTLM_HAVE_NCCL=1)
  message(STATUS "NCCL: ${BOOSTLM_NCCL_LIBRARY} (device collectives over NCCL)")
else()
  message(STATUS "NCCL: not found (device collectives staged through host memory over MPI)")
endif()
