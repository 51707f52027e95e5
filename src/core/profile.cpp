#include "core/profile.h"

namespace boostlm {

Profile& Profile::global() {
  static Profile profile;
  return profile;
}

}  // namespace boostlm
