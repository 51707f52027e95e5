// The safetensors reader (header and tensor data), as checkpoint loading uses it.
#include <vector>

#include "core/error.h"
#include "formats/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  try {
    const SafetensorsReader reader(data, size, "fuzz.safetensors");
    for (const auto& [name, entry] : reader.entries()) {
      FUZZ_CHECK(entry.begin <= entry.end && entry.end <= size);
      // The header check bounds every tensor's element count by its bytes in the input.
      size_t count = 1;
      for (int64_t d : entry.shape) count *= static_cast<size_t>(d);
      FUZZ_CHECK(count <= size);
      std::vector<float> out(count);
      try {
        reader.read(name, entry.shape, out.data());
      } catch (const Error&) {  // unsupported dtype or non-finite values: refused, fine
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
