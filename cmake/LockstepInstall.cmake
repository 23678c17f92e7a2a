# cmake/LockstepInstall.cmake — `cmake --install build --prefix P` installs the
# libraries, the headers (under include/lockstep/, lockstep.h under include/) and
# a package config so that `find_package(lockstep)` gives lockstep::lockstep, and
# `find_package(lockstep COMPONENTS CUDA)` adds lockstep::cuda (Note [CUDA component]).
#
# § Note [CUDA component]
# The installed package has one component besides its CPU libraries, CUDA:
#   find_package(lockstep REQUIRED)                           lockstep::lockstep
#   find_package(lockstep REQUIRED COMPONENTS CUDA)           also lockstep::cuda
#   find_package(lockstep REQUIRED OPTIONAL_COMPONENTS CUDA)  lockstep::cuda if built with CUDA
# The CPU targets are the export set lockstepTargets, the CUDA component the export set
# lockstepCUDATargets, installed only by a build with LOCKSTEP_CUDA=ON (Note [CUDA build]).
# The config (cmake/lockstepConfig.cmake.in) answers the components before it searches any
# dependency: CUDA asked of a CPU-only install sets lockstep_FOUND to false with a message
# saying so and how to build with CUDA; an unknown component the same, naming the known ones.
# A CPU-only install's config never mentions the CUDA toolkit, so a consumer configures on a
# machine without it, and its programs load no CUDA library (tests/install/
# check_cuda_component.sh checks both, from the dynamic section, ldd and LD_DEBUG).
#
# What is not split yet: in a CUDA build the kernels are compiled into the layer libraries
# themselves (core/cuda/ into lockstep_core, distributed/process_group/cuda/ into
# lockstep_distributed), because every CPU kernel forwards to its CUDA kernel by a direct call
# (Note [CUDA dispatch] in core/native/cuda_dispatch.h). So the CPU targets of a CUDA install
# need the toolkit too: its config finds it for every consumer, and says so in its message
# when it is missing (install a -DLOCKSTEP_CUDA=OFF build for CPU-only programs).
# lockstep::cuda is then lockstep::lockstep plus cudart and LOCKSTEP_WITH_CUDA, the name a
# GPU program links. Separating the kernels into their own library, loaded only by
# lockstep::cuda's consumers, needs the dispatch through a table the CUDA library fills
# when it loads (as PyTorch's CUDA hooks) instead of the direct calls.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(lockstep_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
install(TARGETS ${LOCKSTEP_LAYERS} lockstep EXPORT lockstepTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/lockstep.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(layer core autograd nn optim data distributed models)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep
    FILES_MATCHING PATTERN "*.h")
endforeach()
install(EXPORT lockstepTargets NAMESPACE lockstep:: DESTINATION ${lockstep_cmake_dir})

if(LOCKSTEP_CUDA)
  install(TARGETS lockstep_cuda EXPORT lockstepCUDATargets)
  install(EXPORT lockstepCUDATargets NAMESPACE lockstep:: DESTINATION ${lockstep_cmake_dir})
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lockstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lockstepConfig.cmake INSTALL_DESTINATION ${lockstep_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  DESTINATION ${lockstep_cmake_dir})
