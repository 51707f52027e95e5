# Sharded checkpoints (src/checkpoint): pieces of tensors, the index that says where they live,
# reading any piece whatever grid wrote it, and saving every rank's share in parallel and in the
# background with an atomic commit. Below train/ (which uses it), above formats/ and comm/.
target_sources(boostlm_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/piece.cpp
  ${CMAKE_CURRENT_LIST_DIR}/index.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/saver.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_json.cpp
)
