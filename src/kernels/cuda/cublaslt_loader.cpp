// cuBLASLt, loaded on its first call instead of at program start. libcublasLt's static
// initialisers take 0.3-0.5 s of CPU in every process that links it, GPU or not: every `boostlm`
// run, CPU runs and `--help` included, and every rank of a `launch` paid it (issue 63: the test
// suite starts thousands). The backend calls the 15 functions below; each is defined here with the
// header's own declaration (so a changed signature fails to compile) and forwards to the library,
// opened by its soname (the binary's RUNPATH, LD_LIBRARY_PATH, the system's paths) or else at the
// path the build linked against (BOOSTLM_CUBLASLT_PATH).
#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace {

void* library() {
  static void* handle = nullptr;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    handle = dlopen(BOOSTLM_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!handle) handle = dlopen(BOOSTLM_CUBLASLT_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!handle) failure = dlerror();
  });
  if (!handle)
    throw boostlm::error("cannot load cuBLASLt (", BOOSTLM_CUBLASLT_SONAME, ", nor ",
                         BOOSTLM_CUBLASLT_PATH, "): ", failure,
                         ": put the CUDA toolkit's lib directory on LD_LIBRARY_PATH");
  return handle;
}

// The library's function `name`, of the type of our definition of it, resolved once.
template <typename Function>
Function* resolve(Function*, const char* name) {
  void* symbol = dlsym(library(), name);
  if (!symbol) throw boostlm::error("cuBLASLt (", BOOSTLM_CUBLASLT_SONAME, ") has no ", name);
  return reinterpret_cast<Function*>(symbol);
}

}  // namespace

// Forwards the call to the library's function of the same name and type.
#define BOOSTLM_CUBLASLT_FORWARD(name, ...)                  \
  static const auto real = resolve(&::name, #name);          \
  return real(__VA_ARGS__)

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtCreate, handle);
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtDestroy, handle);
}
const char* cublasLtGetStatusName(cublasStatus_t status) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtGetStatusName, status);
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtGetStatusString, status);
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatmul, handle, desc, alpha, a, a_desc, b, b_desc, beta, c,
                           c_desc, d, d_desc, algo, workspace, workspace_bytes, stream);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference,
                                              int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic, handle, desc, a, b, c, d, preference,
                           requested, results, returned);
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatmulDescCreate, desc, compute, scale);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatmulDescDestroy, desc);
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, size_t bytes) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute, desc, attribute, value, bytes);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatmulPreferenceCreate, preference);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatmulPreferenceDestroy, preference);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* value, size_t bytes) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute, preference, attribute, value,
                           bytes);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatrixLayoutDestroy, layout);
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* value, size_t bytes) {
  BOOSTLM_CUBLASLT_FORWARD(cublasLtMatrixLayoutSetAttribute, layout, attribute, value, bytes);
}

}  // extern "C"
