// The emulated device as the runtime's queries describe it: an sm_90 device with an H200's limits
// (its name says it is emulated), BOOSTLM_CUDA_EMULATOR_DEVICES of them (default 1), and the
// runtime's error names and strings.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "cuda_emulator/internal.h"

using namespace cuda_emulator;

namespace {

thread_local int g_current_device = 0;

cudaDeviceProp emulated_properties() {
  cudaDeviceProp p{};
  std::strncpy(p.name, "boostlm emulated CUDA device (sm_90)", sizeof p.name - 1);
  p.totalGlobalMem = kDeviceMemoryBytes;
  p.sharedMemPerBlock = kDefaultSharedBytes;
  p.sharedMemPerBlockOptin = kOptInSharedBytes;
  p.sharedMemPerMultiprocessor = 233472;
  p.reservedSharedMemPerBlock = 1024;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.memPitch = 2147483647;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = 9;
  p.minor = 0;
  p.textureAlignment = 512;
  p.texturePitchAlignment = 32;
  // The host's cores, not an H200's 132: the device computes on them, and the backend sizes work
  // by this count (kernels/cuda/gemm_measure.h measures the GEMM peak on products of 256..1024
  // below 16 SMs; at 132 it multiplied 16384x16384 matrices, hours on one core).
  p.multiProcessorCount = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.canMapHostMemory = 1;
  p.concurrentKernels = 1;
  p.asyncEngineCount = 3;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 6144;
  p.l2CacheSize = 50 * 1024 * 1024;
  p.maxThreadsPerMultiProcessor = 2048;
  p.maxBlocksPerMultiProcessor = 32;
  p.streamPrioritiesSupported = 1;
  p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1;
  p.managedMemory = 1;
  p.computePreemptionSupported = 1;
  p.cooperativeLaunch = 1;
  p.memoryPoolsSupported = 1;
  p.clusterLaunch = 1;
  return p;
}

bool valid_device(int device) {
  return device >= 0 && device < settings().devices;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return record_error(cudaErrorInvalidValue);
  *count = settings().devices;
  if (*count == 0) return record_error(cudaErrorNoDevice);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return record_error(cudaErrorInvalidDevice);
  g_current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return record_error(cudaErrorInvalidValue);
  if (settings().devices == 0) return record_error(cudaErrorNoDevice);
  *device = g_current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return record_error(cudaErrorInvalidValue);
  if (!valid_device(device)) return record_error(cudaErrorInvalidDevice);
  *prop = emulated_properties();
  prop->pciBusID = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return record_error(cudaErrorInvalidValue);
  if (!valid_device(device)) return record_error(cudaErrorInvalidDevice);
  const cudaDeviceProp p = emulated_properties();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY:
    case cudaDevAttrMaxBlockDimZ:
      *value = p.maxThreadsDim[attr - cudaDevAttrMaxBlockDimX];
      break;
    case cudaDevAttrMaxGridDimX:
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ:
      *value = p.maxGridSize[attr - cudaDevAttrMaxGridDimX];
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(p.sharedMemPerMultiprocessor);
      break;
    case cudaDevAttrTotalConstantMemory:
      *value = static_cast<int>(p.totalConstMem);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
      *value = p.regsPerBlock;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrL2CacheSize:
      *value = p.l2CacheSize;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = p.maxThreadsPerMultiProcessor;
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = p.memoryBusWidth;
      break;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrConcurrentKernels:
    case cudaDevAttrCanMapHostMemory:
    case cudaDevAttrManagedMemory:
    case cudaDevAttrCooperativeLaunch:
    case cudaDevAttrMemoryPoolsSupported:
      *value = 1;
      break;
    case cudaDevAttrAsyncEngineCount:
      *value = p.asyncEngineCount;
      break;
    case cudaDevAttrPciBusId:
      *value = device;
      break;
    default:
      *value = 0;  // a capability the emulated device does not have
      break;
  }
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return record_error(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return record_error(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define BOOSTLM_CUDA_ERROR_NAME(e) \
  case e:                          \
    return #e;
    BOOSTLM_CUDA_ERROR_NAME(cudaSuccess)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorInvalidValue)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorMemoryAllocation)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorInitializationError)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorInvalidConfiguration)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorInvalidDevicePointer)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorInvalidMemcpyDirection)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorInvalidDeviceFunction)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorNoDevice)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorInvalidDevice)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorInvalidResourceHandle)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorNotReady)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorLaunchFailure)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorLaunchOutOfResources)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorNotSupported)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorUnknown)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorIllegalState)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorStreamCaptureUnsupported)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorStreamCaptureInvalidated)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorStreamCaptureMerge)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorStreamCaptureUnmatched)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorStreamCaptureUnjoined)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorStreamCaptureIsolation)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorStreamCaptureImplicit)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorCapturedEvent)
    BOOSTLM_CUDA_ERROR_NAME(cudaErrorStreamCaptureWrongThread)
#undef BOOSTLM_CUDA_ERROR_NAME
    default:
      return "cudaErrorUnknown";
  }
}

// CUDA's own strings for these codes.
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge:
      return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    default:
      return "unrecognized error code";
  }
}

}  // extern "C"
