# Other programs' file formats (src/formats: safetensors, Hugging Face directories, GGUF,
# TensorBoard event files) and the
# converters between them and a model's tensors: boostlm_formats, below train/ (whose checkpoints
# use safetensors and read Hugging Face directories) and knowing no trainer, engine or process.
# An object library: the floors it stands on (model/, data/) are sources of boostlm_core, so its
# objects join boostlm_core's archive; that it points only down is checked by test_structure.sh.
add_library(boostlm_formats OBJECT
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_import.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_export.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gguf_writer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gguf_vocab.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gguf_vocab_proto.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gguf_vocab_bpe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gguf_export.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tfevents.cpp
)
# The PyTorch module a low-rank Hugging Face export ships beside its weights, compiled in from
# modeling_boostlm.py (formats/hf_export.h).
file(READ ${CMAKE_CURRENT_LIST_DIR}/modeling_boostlm.py BOOSTLM_MODELING_PY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/modeling_boostlm.cpp.in
               ${CMAKE_CURRENT_BINARY_DIR}/generated/modeling_boostlm.cpp @ONLY)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${CMAKE_CURRENT_LIST_DIR}/modeling_boostlm.py)
target_sources(boostlm_formats PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated/modeling_boostlm.cpp)
target_link_libraries(boostlm_formats PUBLIC boostlm_kernels boostlm_base
                                             nlohmann_json::nlohmann_json PkgConfig::SENTENCEPIECE)
target_link_libraries(boostlm_core PUBLIC boostlm_formats)
