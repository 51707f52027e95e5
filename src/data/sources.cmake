# Data layer (tokenizer, shards, loader, corpus preparation): sources of boostlm_core.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
# Hugging Face tokenizer.json: PCRE2 (Unicode properties, JIT) for the pre-tokenizer's regex, ICU
# for the NFC normalizer some of them name.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
find_package(ZLIB REQUIRED)
target_sources(boostlm_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/shard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/loader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prepare.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prepare_input.cpp
  ${CMAKE_CURRENT_LIST_DIR}/json_record.cpp
)
target_link_libraries(boostlm_core PUBLIC PkgConfig::SENTENCEPIECE PkgConfig::PCRE2 PkgConfig::ICU
                      PRIVATE PkgConfig::ZSTD ZLIB::ZLIB)
