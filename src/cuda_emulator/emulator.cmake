# The emulated CUDA device (BOOSTLM_CUDA=EMULATE, issue 38): boostlm_cuda_emulator, a library that
# implements the CUDA runtime, cuBLASLt and NCCL functions the backend calls, against the real
# toolkit's headers (so every signature is CUDA's), and boostlm_emulated_cuda_sources(), which
# turns a source list's .cu files into C++ for the host compiler (rewrite_launch.py).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_path(BOOSTLM_CUDA_TOOLKIT_INCLUDE_DIR cuda_runtime_api.h
          HINTS ENV CUDA_PATH ENV CUDA_HOME /usr/local/cuda PATH_SUFFIXES include
          DOC "The CUDA toolkit's headers (only headers: nothing of the toolkit is linked)")
if(NOT BOOSTLM_CUDA_TOOLKIT_INCLUDE_DIR)
  message(FATAL_ERROR "BOOSTLM_CUDA=EMULATE needs the CUDA toolkit's headers (cuda_runtime_api.h, "
                      "cublasLt.h, nccl.h): set CUDA_PATH to the toolkit")
endif()
set(BOOSTLM_CUDA_EMULATOR_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(boostlm_cuda_emulator STATIC
  ${CMAKE_CURRENT_LIST_DIR}/fiber.cpp
  ${CMAKE_CURRENT_LIST_DIR}/executor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/streams.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_properties.cpp
  ${CMAKE_CURRENT_LIST_DIR}/record.cpp
)
# cuBLASLt and NCCL on the emulated device, where they are written (their own files and tests).
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/cublaslt.cpp)
  target_sources(boostlm_cuda_emulator PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cublaslt.cpp)
endif()
set(BOOSTLM_CUDA_EMULATOR_NCCL OFF)
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/nccl.cpp)
  target_sources(boostlm_cuda_emulator PRIVATE ${CMAKE_CURRENT_LIST_DIR}/nccl.cpp)
  set(BOOSTLM_CUDA_EMULATOR_NCCL ON)
endif()
# Our include/ first: its cub/ replaces the toolkit's (PTX, which the host compiler cannot build).
target_include_directories(boostlm_cuda_emulator BEFORE PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include)
target_include_directories(boostlm_cuda_emulator SYSTEM PUBLIC ${BOOSTLM_CUDA_TOOLKIT_INCLUDE_DIR})
target_include_directories(boostlm_cuda_emulator PRIVATE ${PROJECT_SOURCE_DIR}/src
                                                   ${CMAKE_CURRENT_LIST_DIR})
# cuBLASLt's GEMMs run on oneDNN; NCCL's exchanges over MPI (the targets the project finds).
target_link_libraries(boostlm_cuda_emulator PUBLIC DNNL::dnnl)
if(BOOSTLM_CUDA_EMULATOR_NCCL)
  target_compile_definitions(boostlm_cuda_emulator PRIVATE OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
  target_link_libraries(boostlm_cuda_emulator PUBLIC MPI::MPI_C)
endif()
target_compile_definitions(boostlm_cuda_emulator PUBLIC BOOSTLM_CUDA_EMULATOR=1)

# boostlm_emulated_cuda_sources(<list variable>): replaces each .cu file of the list by the C++
# that rewrite_launch.py makes of it in the build tree (cuda_emulator/<its path>.cpp), compiled
# with the device prelude force-included (as nvcc includes cuda_runtime.h into every .cu file).
# The .cuh headers beside it hold launches and __shared__ declarations too: they are rewritten
# into the same tree (cuda_emulator/<their path>), which the generated files search first.
function(boostlm_emulated_cuda_sources sources_var)
  set(prelude ${BOOSTLM_CUDA_EMULATOR_DIR}/include/cuda_emulator/prelude.h)
  set(tree ${PROJECT_BINARY_DIR}/cuda_emulator)
  set(rewriter ${BOOSTLM_CUDA_EMULATOR_DIR}/rewrite_launch.py)
  set(result)
  foreach(source IN LISTS ${sources_var})
    if(NOT source MATCHES "\\.cu$")
      list(APPEND result ${source})
      continue()
    endif()
    get_filename_component(source ${source} ABSOLUTE)
    get_filename_component(folder ${source} DIRECTORY)
    file(GLOB headers CONFIGURE_DEPENDS ${folder}/*.cuh)
    set(rewritten_headers)
    foreach(file IN LISTS headers ITEMS ${source})
      file(RELATIVE_PATH relative ${PROJECT_SOURCE_DIR} ${file})
      if(file STREQUAL source)
        set(generated ${tree}/${relative}.cpp)
      else()
        set(generated ${tree}/${relative})
        list(APPEND rewritten_headers ${generated})
      endif()
      get_property(done GLOBAL PROPERTY boostlm_emulated_${generated})
      if(NOT done)
        set_property(GLOBAL PROPERTY boostlm_emulated_${generated} ON)
        add_custom_command(
          OUTPUT ${generated}
          COMMAND ${Python3_EXECUTABLE} ${rewriter} ${file} ${generated}
          DEPENDS ${file} ${rewriter}
          COMMENT "Rewriting ${relative} for the emulated CUDA device"
          VERBATIM)
      endif()
    endforeach()
    file(RELATIVE_PATH relative ${PROJECT_SOURCE_DIR} ${source})
    set(generated ${tree}/${relative}.cpp)
    set_source_files_properties(${generated} PROPERTIES
      COMPILE_OPTIONS "-include;${prelude};-iquote;${tree}/src;-iquote;${folder};-Wno-unknown-pragmas"
      OBJECT_DEPENDS "${rewritten_headers}")
    list(APPEND result ${generated})
  endforeach()
  set(${sources_var} ${result} PARENT_SCOPE)
endfunction()
