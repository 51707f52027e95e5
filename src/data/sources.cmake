# Data layer (tokenizer, shards, loader, corpus preparation): sources of boostlm_core.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
target_sources(boostlm_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/shard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/loader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prepare.cpp
)
target_link_libraries(boostlm_core PUBLIC PkgConfig::SENTENCEPIECE)
