// Every op the harness ships, registered explicitly (no static-initialization tricks: the order is
// visible and the linker cannot drop a suite).
#include "harness/registry.h"
#include "suites/norm/norm_suites.h"

namespace topt {

const Registry& builtin_registry() {
  static const Registry registry = [] {
    Registry r;
    suites::register_rmsnorm(r);
    return r;
  }();
  return registry;
}

}  // namespace topt
