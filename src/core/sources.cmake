# The lowest floor (src/core: errors, dtypes, buffers and their allocator, parameter tables, RNG,
# timers, file and host-file helpers, the thread governor): boostlm_base, which everything else
# links. It knows no kernels, processes or models.
add_library(boostlm_base STATIC
  ${CMAKE_CURRENT_LIST_DIR}/error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dtype.cpp
  ${CMAKE_CURRENT_LIST_DIR}/buffer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rng.cpp
  ${CMAKE_CURRENT_LIST_DIR}/param_table.cpp
  ${CMAKE_CURRENT_LIST_DIR}/profile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/heap.cpp
  ${CMAKE_CURRENT_LIST_DIR}/file_io.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hostfile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fiber.cpp
  ${CMAKE_CURRENT_LIST_DIR}/graph_capture.cpp
  ${CMAKE_CURRENT_LIST_DIR}/threads.cpp
)
target_include_directories(boostlm_base PUBLIC ${PROJECT_SOURCE_DIR}/src)
# OpenMP: the initialisation RNG fills tensors in parallel.
target_link_libraries(boostlm_base PUBLIC OpenMP::OpenMP_CXX)
