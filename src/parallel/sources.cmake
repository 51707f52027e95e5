# One folder per parallel layout (src/parallel/<name>/: its blocks and its cost model): their
# sources join boostlm_core by themselves, so adding a layout edits no CMake file.
file(GLOB BOOSTLM_LAYOUT_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*/*.cpp)
target_sources(boostlm_core PRIVATE ${BOOSTLM_LAYOUT_SOURCES})
