# cmake/LockstepDependencies.cmake — the third-party libraries, all Debian packages
# (scripts/install_deps.sh installs them): Eigen, oneDNN, OpenMP, zlib, Gloo, OpenMPI.
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(dnnl REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(ZLIB REQUIRED)
find_package(Gloo REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)

# Compile flags shared by every lockstep target (not exported to users).
add_library(lockstep_build_flags INTERFACE)
target_compile_options(lockstep_build_flags INTERFACE -Wall -Wextra -Wpedantic -Wno-unused-parameter -fno-math-errno)
if(LOCKSTEP_NATIVE)
  target_compile_options(lockstep_build_flags INTERFACE -march=native)
endif()
