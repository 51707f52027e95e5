// The host-side parts of device collectives: the reduce-scatter decomposition, the NCCL bootstrap's
// message flow, the choice of GPU and of transport (comm/transport.h).
#include "comm/transport.h"


#include <cstdlib>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"

namespace boostlm {

int64_t element_bytes(ElementType type) {
  return type == ElementType::f64 ? 8 : type == ElementType::bf16 ? 2 : 4;
}

ReduceScatterPlan plan_reduce_scatter(const std::vector<int64_t>& counts) {
  BOOSTLM_ASSERT_MSG(!counts.empty(), "plan_reduce_scatter: no counts");
  ReduceScatterPlan plan;
  bool equal = true;
  for (int64_t count : counts) {
    BOOSTLM_ASSERT_MSG(count >= 0, "plan_reduce_scatter: negative count");
    equal = equal && count == counts[0];
  }
  if (equal) {
    plan.equal = true;
    plan.block = counts[0];
    return plan;
  }
  int64_t offset = 0;
  for (int root = 0; root < static_cast<int>(counts.size()); ++root) {
    if (counts[root] > 0) plan.pieces.push_back({root, offset, counts[root]});
    offset += counts[root];
  }
  return plan;
}

void bootstrap_unique_id(Communicator& group, const std::function<UniqueId()>& make_id,
                         const std::function<void(const UniqueId&)>& init) {
  UniqueId id{};
  if (group.rank() == 0) id = make_id();
  group.broadcast_bytes(id.data(), kUniqueIdBytes, 0);
  init(id);
}

int device_for_local_rank(int local_rank, int visible_devices) {
  if (visible_devices <= 0)
    throw error("device collectives: no GPU is visible to this process (rank ", local_rank,
                " on its host); check CUDA_VISIBLE_DEVICES and the driver, or run on the CPU");
  BOOSTLM_ASSERT_MSG(local_rank >= 0, "device_for_local_rank: negative local rank");
  return local_rank % visible_devices;
}

int local_rank_from_env(const std::function<const char*(const char*)>& getenv) {
  // Under srun no OMPI_ variable is set and SLURM_LOCALID is the rank's; under mpirun inside an
  // allocation SLURM_LOCALID is Open MPI's daemon's (0 for every rank), but OMPI_'s comes first.
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const char* value = getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end != '\0' || rank < 0)
      throw error("device collectives: ", name, "=", value, " is not a local rank (expected an ",
                  "integer >= 0, as mpirun sets it)");
    return static_cast<int>(rank);
  }
  return mpi_local_rank();  // MPI's own split (0 without MPI)
}

bool nccl_requested(const char* env_value) {
  if (env_value == nullptr || *env_value == '\0') return true;
  const std::string value = env_value;
  if (value == "1") return true;
  if (value == "0") return false;
  throw error("BOOSTLM_NCCL=", value, ": expected 1 (NCCL for device collectives, the default) ",
              "or 0 (stage them through host memory over MPI)");
}

}  // namespace boostlm
