# Performance model (`boostlm plan`, `boostlm calibrate`): sources of boostlm_core.
# BOOSTLM_PLAN_SOURCE_DIR lets the model find hardware/*.json and configs/ from any directory.
set(BOOSTLM_PLAN_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/hardware.cpp
  ${CMAKE_CURRENT_LIST_DIR}/workload.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cost.cpp
  ${CMAKE_CURRENT_LIST_DIR}/roofline.cpp
  ${CMAKE_CURRENT_LIST_DIR}/memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/step_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/paper.cpp
  ${CMAKE_CURRENT_LIST_DIR}/models.cpp
  ${CMAKE_CURRENT_LIST_DIR}/enumerate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/calibration.cpp
)
target_sources(boostlm_core PRIVATE ${BOOSTLM_PLAN_SOURCES})  # the definition: CMakeLists.txt
